"""The self-probe's key is issued once, at deploy, by the SelfProbeKey custom resource: the stack's own endpoint
is registered with a key the endpoint accepts, and deleting the resource revokes it. The probe dispatcher only
reads the registry."""

from __future__ import annotations

import json

import boto3
import botocore.exceptions
import pytest

from mcp_backend.api_keys import ApiKeyTable, hash_api_key
from mcp_backend.config import ProbeDispatcherSettings, SelfProbeKeySettings, load_settings
from mcp_backend.custom_resource import CustomResourceFailed, put_response, respond_to_cloudformation
from mcp_backend.monitor.items import AUTH_CIPHERTEXT
from mcp_backend.probes.dispatcher import ProbeDispatcher
from mcp_backend.probes.endpoint_tokens import EndpointTokenCipher
from mcp_backend.probes.self_probe import SelfProbeKeys

FUNCTION_URL = "https://abc123.lambda-url.us-east-1.on.aws/"
MOVED_URL = "https://def456.lambda-url.us-east-1.on.aws/"
RESPONSE_URL = "https://cloudformation-custom-resource-response-useast1.s3.amazonaws.com/signed"


class FunctionUrls:
    """Lambda's GetFunctionUrlConfig for McpServer's alias: its current Function URL."""

    def __init__(self, alias_arn: str) -> None:
        self.alias_arn, self.url = alias_arn, FUNCTION_URL

    def get_function_url_config(self, FunctionName: str, Qualifier: str) -> dict:
        assert f"{FunctionName}:{Qualifier}" == self.alias_arn
        return {"FunctionUrl": self.url, "AuthType": "NONE"}


class CloudFormation:
    """Sends the custom resource's requests and records the answers it PUTs to the response URL."""

    def __init__(self, local) -> None:
        settings = load_settings(SelfProbeKeySettings, local.stack.function("SelfProbeKeyIssuer").environment)
        self.urls = FunctionUrls(settings.mcp_server_function)
        self.keys = SelfProbeKeys(
            settings, boto3.client("dynamodb"), boto3.client("secretsmanager"), lambda_client=self.urls
        )
        self.answers: list[dict] = []

    def send(self, request_type: str, physical_id: str | None = None, url: str = FUNCTION_URL) -> dict:
        event = {
            "RequestType": request_type,
            "ResponseURL": RESPONSE_URL,
            "StackId": "arn:aws:cloudformation:us-east-1:123456789012:stack/mcp-backend-dev/guid",
            "RequestId": f"request-{len(self.answers)}",
            "LogicalResourceId": "SelfProbeKey",
            "ResourceType": "Custom::SelfProbeKey",
            "ResourceProperties": {"ServiceToken": "arn:issuer", "FunctionUrl": url},
        }
        if physical_id:
            event["PhysicalResourceId"] = physical_id
        respond_to_cloudformation(event, self.keys.handle, send=lambda _, body: self.answers.append(json.loads(body)))
        return self.answers[-1]


class LambdaApi:
    def __init__(self) -> None:
        self.invocations: list[dict] = []

    def invoke(self, **request) -> dict:
        self.invocations.append(request)
        return {"StatusCode": 202}


def self_item(local) -> dict | None:
    return (
        boto3.client("dynamodb")
        .get_item(
            TableName=local.table_name("MonitorTable"), Key={"serverId": {"S": "self"}, "sortKey": {"S": "endpoint"}}
        )
        .get("Item")
    )


def opened_token(local, item: dict | None) -> str:
    """The self item's token, opened as ProbeWorker opens it (the only function the key lets decrypt)."""
    assert item is not None
    key_id = local.stack.function("ProbeWorker").environment["ENDPOINT_TOKEN_KEY_ID"]
    return EndpointTokenCipher(key_id).open("self", "stack", item[AUTH_CIPHERTEXT]["B"])


def key_table(local) -> dict:
    secret = local.stack.function("McpServer").environment["API_KEYS_SECRET_ID"]
    text = boto3.client("secretsmanager").get_secret_value(SecretId=secret, VersionStage="AWSCURRENT")["SecretString"]
    return ApiKeyTable.model_validate_json(text).root


def test_create_registers_the_own_endpoint_with_a_key_the_endpoint_accepts(local):
    # Given a fresh deployment: no self item, an empty key table
    cloudformation = CloudFormation(local)

    # When CloudFormation creates the custom resource
    answer = cloudformation.send("Create")

    # Then it succeeded, the endpoint is registered with a token whose hash the endpoint's key table holds
    assert answer["Status"] == "SUCCESS" and answer["NoEcho"] is True
    item = self_item(local)
    assert item is not None and item["url"]["S"] == FUNCTION_URL.rstrip("/") + "/mcp"
    assert "authToken" not in item  # only the sealed form is stored
    token = opened_token(local, item)
    principal = key_table(local)[hash_api_key(token)]
    assert (principal.user_id, principal.tier) == ("self-probe", "internal")
    # And the physical id names the key's hash only, never the key
    assert answer["PhysicalResourceId"] == f"self-probe-key-{hash_api_key(token)}"
    assert token not in json.dumps(answer)


def test_the_dispatcher_probes_the_registered_endpoint_without_the_key_table(local):
    # Given the self endpoint registered at deploy
    CloudFormation(local).send("Create")
    environment = local.stack.function("ProbeDispatcher").environment
    lambda_api = LambdaApi()

    # When the schedule ticks
    settings = load_settings(ProbeDispatcherSettings, environment)
    ProbeDispatcher(settings, boto3.client("dynamodb"), lambda_api).dispatch()

    # Then it probed the own endpoint, carrying no token, and its configuration names no key table
    [call] = lambda_api.invocations
    assert json.loads(call["Payload"])["serverId"] == "self"
    assert "authToken" not in call["Payload"].decode()
    assert "API_KEYS_SECRET_ID" not in environment


def test_an_update_moves_the_endpoint_and_keeps_its_key(local):
    cloudformation = CloudFormation(local)
    created = cloudformation.send("Create")
    token = opened_token(local, self_item(local))

    cloudformation.urls.url = MOVED_URL  # McpServer's URL was replaced
    updated = cloudformation.send("Update", created["PhysicalResourceId"], url=MOVED_URL)

    assert updated["Status"] == "SUCCESS" and updated["PhysicalResourceId"] == created["PhysicalResourceId"]
    item = self_item(local)
    assert item["url"]["S"] == MOVED_URL.rstrip("/") + "/mcp" and opened_token(local, item) == token
    assert len(key_table(local)) == 1


def test_delete_revokes_the_key_and_deregisters_the_endpoint(local):
    cloudformation = CloudFormation(local)
    created = cloudformation.send("Create")

    deleted = cloudformation.send("Delete", created["PhysicalResourceId"])

    assert deleted["Status"] == "SUCCESS"
    assert key_table(local) == {} and self_item(local) is None


def test_a_refused_create_fails_the_deploy_with_a_reason_and_writes_nothing(local):
    # Given a property that is not the stack's https Function URL
    cloudformation = CloudFormation(local)

    # When CloudFormation creates the resource with it
    answer = cloudformation.send("Create", url="http://169.254.169.254/")

    # Then CloudFormation hears FAILED with the reason, and no key or endpoint was written
    assert answer["Status"] == "FAILED" and "FunctionUrl" in answer["Reason"]
    assert key_table(local) == {} and self_item(local) is None
    # And the rollback's Delete of the never-issued resource succeeds without touching anything
    assert cloudformation.send("Delete", answer["PhysicalResourceId"])["Status"] == "SUCCESS"


@pytest.mark.parametrize(
    "url", ["http://cloudformation.s3.amazonaws.com/x", "https://attacker.example/x", "https://s3.amazonaws.com.evil/x"]
)
def test_the_answer_goes_to_a_cloudformation_response_url_only(url):
    with pytest.raises(CustomResourceFailed):
        put_response(url, b"{}")


@pytest.mark.parametrize("request_type", ["Create", "Update"])
def test_a_url_other_than_the_stacks_own_function_url_is_refused_and_nothing_moves(local, request_type):
    # Given a deployed self-probe registration (for an Update), and a request naming another https URL (another
    # stack's Function URL, or any host), as a principal allowed to invoke the issuer could send
    cloudformation = CloudFormation(local)
    created = cloudformation.send("Create") if request_type == "Update" else {}
    before = self_item(local)

    # When the issuer handles it
    answer = cloudformation.send(request_type, created.get("PhysicalResourceId"), url=MOVED_URL)

    # Then CloudFormation hears FAILED naming the stack's own URL, and the self endpoint did not move
    assert answer["Status"] == "FAILED" and FUNCTION_URL in answer["Reason"]
    assert self_item(local) == before
    assert len(key_table(local)) == (1 if request_type == "Update" else 0)


class KmsAliasNotYetAuthorized:
    """KMS while the new key alias does not count for authorization yet (the boundary names the key by its
    alias; KMS says such a change may take up to five minutes): Encrypt is refused `denials` times, then works."""

    def __init__(self, denials: int) -> None:
        self.denials, self.calls = denials, 0

    def encrypt(self, **request) -> dict:
        self.calls += 1
        if self.calls <= self.denials:
            error = {"Error": {"Code": "AccessDeniedException", "Message": "not authorized"}}
            raise botocore.exceptions.ClientError(error, "Encrypt")
        return boto3.client("kms").encrypt(**request)


def issuer_with(local, kms, slept: list[float]) -> CloudFormation:
    cloudformation = CloudFormation(local)
    settings = cloudformation.keys.settings
    cloudformation.keys = SelfProbeKeys(
        settings,
        boto3.client("dynamodb"),
        boto3.client("secretsmanager"),
        kms_client=kms,
        lambda_client=cloudformation.urls,
        sleep=slept.append,
    )
    return cloudformation


def test_create_waits_for_the_new_key_alias_to_count_before_issuing_anything(local):
    # Given a first deploy, where the endpoint-token key's new alias is refused for the first few seconds
    kms, slept = KmsAliasNotYetAuthorized(denials=3), list[float]()

    # When CloudFormation creates the custom resource
    answer = issuer_with(local, kms, slept).send("Create")

    # Then the issuer waited (without issuing a key meanwhile) and then registered the endpoint
    assert answer["Status"] == "SUCCESS" and len(slept) == 3
    assert self_item(local) is not None and len(key_table(local)) == 1


def test_create_fails_naming_the_key_when_the_alias_never_counts_and_issues_no_key(local):
    kms, slept = KmsAliasNotYetAuthorized(denials=10_000), list[float]()

    answer = issuer_with(local, kms, slept).send("Create")

    assert answer["Status"] == "FAILED" and "ENDPOINT_TOKEN_KEY_ID" in answer["Reason"]
    assert sum(slept) >= 300  # KMS's five minutes, waited in the issuer's own time
    assert key_table(local) == {} and self_item(local) is None
