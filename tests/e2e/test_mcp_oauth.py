"""The MCP endpoint in OAuth mode on the local stack, as `make dev AUTH=oauth` runs it: the template's Cognito
pool, resource server and client-credentials client created in moto, tokens from the local token endpoint
signed with the pool's key, the endpoint verifying them against the pool's JWKS served by moto, and the
SDK's client sending the bearer token in both protocol eras."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

import devstack.__main__ as devstack_cli
from devstack.__main__ import banner, issue_dev_keys
from devstack.stack.cognito import machine_clients
from tests.e2e.conftest import Endpoint, mcp_client

pytestmark = pytest.mark.e2e


@pytest.fixture
def oauth_stack(start_stack):
    """The product stack with AuthMode=oauth, its served endpoint, and the created client's credentials."""
    stack = start_stack(parameters={"AuthMode": "oauth"})
    [web] = stack.web_functions.values()
    [(client_id, secret)] = machine_clients(stack.client("cognito-idp"))
    return stack, web, client_id, secret


def access_token(stack, client_id: str, secret: str, scope: str | None = None) -> str:
    form = {"grant_type": "client_credentials", **({"scope": scope} if scope else {})}
    response = httpx.post(f"{stack.lambda_url}/oauth2/token", data=form, auth=(client_id, secret))
    assert response.status_code == 200, response.text
    return response.json()["access_token"]


def rpc(url: str, token: str | None, method: str, params: dict | None = None) -> httpx.Response:
    headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    if token:
        headers["authorization"] = f"Bearer {token}"
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params or {}}
    return httpx.post(url, json=body, headers=headers, timeout=30)


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
def test_an_sdk_client_with_a_client_credentials_token_submits_and_reads_its_job(oauth_stack, mode):
    # Given the OAuth-mode stack, a token from its token endpoint, and the sample data under the client's prefix
    stack, web, client_id, secret = oauth_stack
    token = access_token(stack, client_id, secret)
    endpoint = Endpoint(url=f"{web.url}/mcp", alice_key=token, bob_key=token, local=stack.environment)
    user_id = f"oauth:{stack.environment.stack.function('McpServer').environment['OAUTH_ISSUER']}:{client_id}"
    [sales] = [url for url in stack.environment.seed_datasets(owners=(user_id,)) if url.endswith("/sales.csv")]

    # When the SDK's client, in this protocol era, lists tools and submits an analysis, and the job runs
    async def submit() -> tuple[list[str], str]:
        async with mcp_client(endpoint, mode, token) as client:
            tools = [tool.name for tool in (await client.list_tools()).tools]
            result = await client.call_tool("submit_analysis", {"dataset_url": sales})
            return tools, result.structured_content["jobId"]

    tools, job_id = asyncio.run(submit())
    stack.settle()

    async def fetch() -> dict:
        async with mcp_client(endpoint, mode, token) as client:
            return (await client.call_tool("get_job", {"job_id": job_id})).structured_content

    job = asyncio.run(fetch())

    # Then the job belongs to the token's subject (the client) and ran through the worker
    assert "submit_analysis" in tools
    assert (job["status"], job["result"]["rowCount"]) == ("SUCCEEDED", 6)
    stored = stack.client("dynamodb").scan(TableName=stack.environment.table_name("JobTable"))["Items"]
    # (the caller's quota items, keyed active#<user> and daily#<user>#<day>, are not jobs)
    assert {item["userId"]["S"] for item in stored if "#" not in item["jobId"]["S"]} == {user_id}
    assert {item["jobId"]["S"].split("#")[1] for item in stored if "#" in item["jobId"]["S"]} == {user_id}


def test_the_endpoint_publishes_its_metadata_and_challenges_with_it(oauth_stack):
    # Given the OAuth-mode stack
    stack, web, _, _ = oauth_stack
    pool_id = stack.environment.stack.ensure("McpUserPool").ref

    # When a client without a token fetches the metadata and calls the endpoint, and a dev API key is tried
    metadata = httpx.get(f"{web.url}/.well-known/oauth-protected-resource/mcp")
    unauthenticated = rpc(f"{web.url}/mcp", None, "tools/list")
    key = issue_dev_keys(stack)  # oauth-only: no key is issued, so none is printed

    # Then the metadata names the pool as authorization server and the 401 points at the metadata
    assert metadata.status_code == 200
    assert metadata.json()["resource"] == f"{web.url}/mcp"
    assert metadata.json()["authorization_servers"] == [f"https://cognito-idp.us-east-1.amazonaws.com/{pool_id}"]
    assert metadata.json()["scopes_supported"] == ["mcp/read", "mcp/submit"]
    assert unauthenticated.status_code == 401
    assert unauthenticated.headers["www-authenticate"] == (
        f'Bearer resource_metadata="{web.url}/.well-known/oauth-protected-resource/mcp"'
    )
    assert key == {}
    text = banner(stack, 1.0, key)
    assert f"{stack.lambda_url}/oauth2/token" in text and "grant_type=client_credentials" in text


def test_a_read_only_token_reads_but_may_not_submit(oauth_stack):
    # Given a token granted only mcp/read
    stack, web, client_id, secret = oauth_stack
    token = access_token(stack, client_id, secret, scope="mcp/read")

    # When it calls a read tool and a submit tool
    reading = rpc(f"{web.url}/mcp", token, "tools/call", {"name": "list_endpoints", "arguments": {}})
    submitting = rpc(
        f"{web.url}/mcp",
        token,
        "tools/call",
        {"name": "submit_analysis", "arguments": {"dataset_url": "s3://local-datasets/sales.csv"}},
    )

    # Then reading works and submitting is a 403 naming the missing scope
    assert reading.status_code == 200
    assert submitting.status_code == 403
    assert 'error="insufficient_scope", scope="mcp/submit"' in submitting.headers["www-authenticate"]


def test_the_token_endpoint_refuses_a_wrong_secret_or_scope(oauth_stack):
    stack, _, client_id, secret = oauth_stack
    form = {"grant_type": "client_credentials"}
    wrong_secret = httpx.post(f"{stack.lambda_url}/oauth2/token", data=form, auth=(client_id, "nope"))
    wrong_scope = httpx.post(
        f"{stack.lambda_url}/oauth2/token", data={**form, "scope": "mcp/admin"}, auth=(client_id, secret)
    )
    assert (wrong_secret.status_code, wrong_secret.json()) == (400, {"error": "invalid_client"})
    assert (wrong_scope.status_code, wrong_scope.json()) == (400, {"error": "invalid_scope"})


def test_make_token_prints_a_token_the_endpoint_accepts(oauth_stack, monkeypatch, capsys):
    # Given `make dev AUTH=oauth` running (the stack's endpoints as the running file names them)
    stack, web, _, _ = oauth_stack
    monkeypatch.setattr(devstack_cli, "running_stack", lambda: {"aws": stack.aws_url, "lambda": stack.lambda_url})

    # When `make token SCOPE=mcp/read` runs and its token calls a read tool
    assert devstack_cli.print_token("mcp/read") == 0
    token = capsys.readouterr().out.strip()
    response = rpc(f"{web.url}/mcp", token, "tools/call", {"name": "list_endpoints", "arguments": {}})

    # Then the endpoint accepts it
    assert response.status_code == 200


def test_both_mode_accepts_the_dev_api_key_and_a_token(start_stack):
    # Given the stack with AuthMode=both: a dev API key and the pool's client
    stack = start_stack(parameters={"AuthMode": "both"})
    [web] = stack.web_functions.values()
    [key] = issue_dev_keys(stack).values()
    [(client_id, secret)] = machine_clients(stack.client("cognito-idp"))

    # When each credential calls a tool
    answers = [
        rpc(f"{web.url}/mcp", credential, "tools/call", {"name": "list_endpoints", "arguments": {}})
        for credential in (key, access_token(stack, client_id, secret))
    ]

    # Then both are accepted, and a 401 still points at the metadata
    assert [answer.status_code for answer in answers] == [200, 200]
    assert "resource_metadata=" in rpc(f"{web.url}/mcp", "mcpk_wrong", "tools/list").headers["www-authenticate"]


def legacy_rpc(url: str, token: str, method: str, params: dict) -> httpx.Response:
    """One 2025-11-25 request with a bearer token (stateless: no session)."""
    headers = {
        "accept": "application/json, text/event-stream",
        "content-type": "application/json",
        "authorization": f"Bearer {token}",
        "mcp-protocol-version": "2025-11-25",
    }
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    return httpx.post(url, json=body, headers=headers, timeout=30)


def answer_of(response: httpx.Response) -> dict:
    assert response.status_code == 200, response.text
    if response.headers["content-type"].startswith("application/json"):
        return response.json()
    return next(json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: "))


def test_a_read_only_token_may_not_read_or_cancel_the_task_of_a_submit_tool(oauth_stack):
    # Given a task of analyze_dataset (a submit tool) created with a full token, and the same client's read token
    stack, web, client_id, secret = oauth_stack
    full, reader = access_token(stack, client_id, secret), access_token(stack, client_id, secret, scope="mcp/read")
    user_id = f"oauth:{stack.environment.stack.function('McpServer').environment['OAUTH_ISSUER']}:{client_id}"
    [sales] = [url for url in stack.environment.seed_datasets(owners=(user_id,)) if url.endswith("/sales.csv")]
    url = f"{web.url}/mcp"
    call = {"name": "analyze_dataset", "arguments": {"dataset_url": sales}, "task": {"ttl": 60000}}
    task_id = answer_of(legacy_rpc(url, full, "tools/call", call))["result"]["task"]["taskId"]

    # When the read token asks for its status, its result and its cancellation, and the full token for its status
    status, result = (answer_of(legacy_rpc(url, reader, m, {"taskId": task_id})) for m in ("tasks/get", "tasks/result"))
    cancel = legacy_rpc(url, reader, "tasks/cancel", {"taskId": task_id})
    allowed = answer_of(legacy_rpc(url, full, "tasks/get", {"taskId": task_id}))

    # Then the read token's reads are refused naming the scope, its cancel is the guard's 403 (tasks/cancel always
    # needs submit), and the full token reads the task
    refusal = {"code": -32602, "message": "Forbidden: insufficient scope", "data": {"requiredScope": "submit"}}
    assert status["error"] == refusal and result["error"] == refusal
    assert cancel.status_code == 403 and 'error="insufficient_scope"' in cancel.headers["www-authenticate"]
    assert allowed["result"]["taskId"] == task_id
