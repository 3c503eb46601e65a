"""The dispatcher's first run: the stack's own MCP endpoint is registered and probed with a key it can use."""

from __future__ import annotations

import boto3

from mcp_backend.api_keys import ApiKeyTable, hash_api_key
from mcp_backend.config import ProbeDispatcherSettings, load_settings
from mcp_backend.probes.dispatcher import ProbeDispatcher
from mcp_backend.probes.endpoint_tokens import EndpointTokenCipher

FUNCTION_URL = "https://abc123.lambda-url.us-east-1.on.aws/"


class LambdaApi:
    """GetFunctionUrlConfig answers the deployed Function URL; Invoke records what was dispatched."""

    def __init__(self) -> None:
        self.invocations: list[dict] = []

    def get_function_url_config(self, FunctionName: str, Qualifier: str) -> dict:
        return {"FunctionUrl": FUNCTION_URL}

    def invoke(self, **request) -> dict:
        self.invocations.append(request)
        return {"StatusCode": 202}


def dispatcher(local, lambda_api: LambdaApi, **overrides: str) -> ProbeDispatcher:
    environment = {**local.stack.function("ProbeDispatcher").environment, **overrides}
    return ProbeDispatcher(load_settings(ProbeDispatcherSettings, environment), boto3.client("dynamodb"), lambda_api)


def self_item(local) -> dict:
    return boto3.client("dynamodb").get_item(
        TableName=local.table_name("MonitorTable"), Key={"serverId": {"S": "self"}, "sortKey": {"S": "endpoint"}}
    )["Item"]


def key_table(local) -> dict:
    secret = local.stack.function("McpServer").environment["API_KEYS_SECRET_ID"]
    text = boto3.client("secretsmanager").get_secret_value(SecretId=secret, VersionStage="AWSCURRENT")["SecretString"]
    return ApiKeyTable.model_validate_json(text).root


def test_first_run_registers_the_own_endpoint_with_a_key_the_endpoint_accepts(local):
    # Given a fresh deployment: no self item, an empty key table
    lambda_api = LambdaApi()

    # When the schedule ticks twice
    dispatcher(local, lambda_api).dispatch()
    dispatcher(local, lambda_api).dispatch()

    # Then the own endpoint is registered once, with a token whose hash the endpoint's key table holds
    item = self_item(local)
    assert item["url"]["S"] == FUNCTION_URL.rstrip("/") + "/mcp"
    assert "authToken" not in item  # stored only sealed; ProbeWorker's key policy statement opens it
    key_id = local.stack.function("ProbeWorker").environment["ENDPOINT_TOKEN_KEY_ID"]
    token = EndpointTokenCipher(key_id).open("self", "stack", item["authTokenCiphertext"]["B"])
    principal = key_table(local)[hash_api_key(token)]
    assert (principal.user_id, principal.tier) == ("self-probe", "internal")
    assert len(key_table(local)) == 1
    # And every tick dispatched one probe of it, carrying no token
    assert len(lambda_api.invocations) == 2
    assert all("authToken" not in call["Payload"].decode() for call in lambda_api.invocations)
