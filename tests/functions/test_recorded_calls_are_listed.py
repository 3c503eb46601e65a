"""The AWS calls each function makes on the local stack, recorded while it handles the event fixtures of
`events/` (AuthorizationServer: while a client registers, signs a user in, gets, refreshes and revokes tokens), are
all in the list the IAM evaluation checks (tests/template/test_iam_evaluation.py `function_calls`): a call added to
the code and not to the list fails here, before the evaluator would miss it."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import boto3
import httpx
import pytest
from botocore.client import BaseClient
from starlette.testclient import TestClient

from devstack.stack.template import ROOT
from devstack.wired_stack import LocalEnvironment
from mcp_backend.authorization.app import AuthorizationServer
from mcp_backend.authorization.clients import MetadataDocuments
from mcp_backend.authorization.signing import KmsSigner
from mcp_backend.authorization.store import AuthorizationStore
from mcp_backend.authorization.upstream import Upstream
from mcp_backend.batch import StreamBatchStuck
from mcp_backend.config import AuthorizationServerSettings, load_settings
from tests.iam.stacks import Stack
from tests.template.test_iam_evaluation import BUILTIN, BUILTIN_UPSTREAM, DATASETS, function_calls
from tests.unit import test_authorization_server as server
from tests.unit import test_authorization_upstream as provider

EVENTS = ROOT / "events"
# The fixtures each function handles (ProbeWorker's needs a served endpoint, McpServer's an HTTP server: both
# are exercised by the e2e tier, and their calls are listed from their code).
FIXTURES = {
    "ToolWorker": "tool_worker",
    "CallLogAnalyzer": "call_log_analyzer",
    "DriftDetector": "monitor_table",
    "ExpiryRollup": "monitor_table",
    "ProbeDispatcher": "probe_dispatcher",
    "ProbeRecorder": "probe_recorder",
    "AlertHandler": "alert_handler",
}
# IAM authorizes a transaction per item action, a batch send as SendMessage
# (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/transaction-apis-iam.html).
TRANSACT_ITEM_ACTIONS = {"Put": "PutItem", "Update": "UpdateItem", "Delete": "DeleteItem", "ConditionCheck": "GetItem"}
OPERATION_ACTIONS = {("sqs", "SendMessageBatch"): "sqs:SendMessage", ("lambda", "Invoke"): "lambda:InvokeFunction"}


def actions_of(service: str, operation: str, params: dict[str, Any]) -> list[str]:
    prefix = {"monitoring": "cloudwatch"}.get(service, service)
    if (service, operation) == ("dynamodb", "TransactWriteItems"):
        return [f"dynamodb:{TRANSACT_ITEM_ACTIONS[next(iter(item))]}" for item in params["TransactItems"]]
    return [OPERATION_ACTIONS.get((service, operation), f"{prefix}:{operation}")]


@contextmanager
def recording() -> Iterator[set[str]]:
    """Every IAM action behind the AWS calls made in this process meanwhile."""
    recorded: set[str] = set()
    make_api_call = BaseClient._make_api_call

    def record(client: BaseClient, operation: str, params: dict[str, Any]) -> Any:
        recorded.update(actions_of(client.meta.service_model.service_name, operation, params))
        return make_api_call(client, operation, params)

    with mock.patch.object(BaseClient, "_make_api_call", record):
        yield recorded


@pytest.mark.parametrize("function", sorted(FIXTURES))
def test_every_call_a_function_makes_on_the_local_stack_is_in_the_evaluated_list(local, function):
    # Given the function's event fixtures
    fixtures = sorted(p for p in (EVENTS / FIXTURES[function]).glob("*.json") if not p.name.endswith(".state.json"))
    assert fixtures
    local.stack.create_all()  # the local stack's own calls (creating resources on demand) are not the function's
    # When it handles each on the local stack, its AWS calls recorded
    with recording() as recorded:
        for fixture in fixtures:
            # A stream consumer fails a batch on purpose (to bisect it); its calls were made all the same
            with contextlib.suppress(StreamBatchStuck):
                local.invoke(function, json.loads(Path(fixture).read_text()))
    # Then it called AWS, and every action it needed is one the IAM evaluation checks for it
    listed = {action for action, _, _ in function_calls(Stack("mcp", DATASETS))[function]}
    assert recorded, function
    assert recorded - listed == set(), function


class RecordedNonces(Upstream):
    """The real upstream login, against a stand-in provider that answers with the nonce the login sent."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.nonces: list[str] = []

    async def login_url(self, redirect_uri: str, state: str, nonce: str, challenge: str) -> str:
        self.nonces.append(nonce)
        return await super().login_url(redirect_uri, state, nonce, challenge)


def authorization_server(environment: LocalEnvironment) -> TestClient:
    """The function's app as create_app builds it, on the local stack; only the provider's HTTP is stood in."""
    variables = environment.stack.function("AuthorizationServer").environment
    server.stack_urls_are(variables)
    settings = load_settings(AuthorizationServerSettings, variables)
    issuer = settings.upstream_issuer
    if settings.upstream_user_pool_id:  # the ID token's user, whom each refresh checks in the pool
        boto3.client("cognito-idp").admin_create_user(UserPoolId=settings.upstream_user_pool_id, Username="ann")

    def documents(url: str) -> bytes:  # the provider's discovery document and keys, for whichever issuer
        return provider.provider_documents(url).replace(provider.ISSUER.encode(), issuer.encode())

    def token_endpoint(request: httpx.Request) -> httpx.Response:
        form = dict(httpx.QueryParams(request.content.decode()))
        token = provider.id_token(iss=issuer, aud=form["client_id"], nonce=upstream.nonces[-1])
        return httpx.Response(200, json={"id_token": token})

    upstream = RecordedNonces(settings, fetch=documents, transport=httpx.MockTransport(token_endpoint))
    app = AuthorizationServer(
        settings,
        AuthorizationStore(settings.authorization_table_name),
        KmsSigner(settings.authorization_signing_key_id),
        upstream,
        MetadataDocuments(()),
    )
    return TestClient(app, base_url=server.ISSUER, follow_redirects=False)


@pytest.mark.parametrize("parameters", [BUILTIN, BUILTIN_UPSTREAM], ids=["the stack's pool", "another provider"])
def test_every_call_the_authorization_server_makes_on_the_local_stack_is_in_the_evaluated_list(aws, parameters):
    # Given the stack with its authorization server (and, for another provider, its client secret)
    secret_arn = ""
    if "UpstreamClientSecretArn" in parameters:
        secret = boto3.client("secretsmanager").create_secret(Name="mcp/upstream-client", SecretString="s3cret")
        secret_arn = secret["ARN"]
    environment = LocalEnvironment(
        boto3.client, parameters={**parameters, "UpstreamClientSecretArn": secret_arn}, on_demand=True
    )
    environment.stack.create_all()
    client = authorization_server(environment)
    # When a client registers, signs a user in, gets tokens, refreshes and revokes them, and reads the keys
    with recording() as recorded:
        client_id = server.register(client)["client_id"]
        code, verifier = server.sign_in(client, client_id)
        tokens = server.exchange(client, client_id, code, verifier).json()
        rotated = server.refresh(client, client_id, tokens["refresh_token"]).json()
        revoked = client.post("/revoke", data={"token": rotated["refresh_token"], "client_id": client_id})
        keys = client.get("/jwks").json()["keys"]
    # Then the sign-in went through, and every action it needed is one the IAM evaluation checks for it
    assert revoked.status_code == 200 and len(keys) == 1
    listed = {action for action, _, _ in function_calls(Stack("mcp", parameters))["AuthorizationServer"]}
    assert recorded - listed == set()
    expected = {"kms:Sign", "kms:GetPublicKey", "dynamodb:PutItem", "dynamodb:GetItem", "dynamodb:UpdateItem"}
    expected |= {"ssm:GetParameter"}  # the endpoint's URL; the stack's pool's login client id too
    expected |= {"secretsmanager:GetSecretValue"} if secret_arn else set()
    expected |= set() if secret_arn else {"cognito-idp:AdminGetUser", "cognito-idp:AdminListGroupsForUser"}
    assert recorded >= expected
