"""One tenant's key (bob) tries, against the product's MCP app on the local stack, each attack on another tenant
(alice) or on the stack that the tenant controls cover: every one is refused with a typed answer, and nothing is
written for it."""

from __future__ import annotations

import json

import anyio
import boto3
import httpx
import pytest
from mcp.shared.exceptions import MCPError

from tests.e2e.conftest import Endpoint, mcp_client

pytestmark = pytest.mark.e2e

ALICES_SALES = "s3://local-datasets/apikey%3Auser-alice/sales.csv"


def post(endpoint: Endpoint, key: str, body: bytes) -> httpx.Response:
    headers = {
        "authorization": f"Bearer {key}",
        "content-type": "application/json",
        "accept": "application/json, text/event-stream",
    }
    return httpx.post(endpoint.url, content=body, headers=headers, timeout=30)


async def refused_params(client, tool: str, arguments: dict) -> str:
    """The refusal's text: invalid arguments are a tool execution error from protocol 2025-11-25 on (the model
    can correct them), a -32602 before it."""
    try:
        result = await client.call_tool(tool, arguments)
    except MCPError as error:
        assert error.error.code == -32602
        return error.error.message
    if result.is_error:
        return " ".join(getattr(part, "text", "") for part in result.content)
    raise AssertionError(f"{tool} accepted {arguments}")


def job_count(endpoint: Endpoint) -> int:
    return boto3.client("dynamodb").scan(TableName=endpoint.local.table_name("JobTable"), Select="COUNT")["Count"]


def test_one_tenants_key_finds_nothing_of_another_tenant_or_of_the_stack(endpoint):
    # Given alice's dataset under her prefix, and bob's key
    async def attacks() -> dict:
        async with mcp_client(endpoint, "2026-07-28", key=endpoint.bob_key) as bob:
            return {
                # When bob analyses alice's dataset, synchronously and as a job
                "read": await bob.call_tool("analyze_dataset", {"dataset_url": ALICES_SALES}),
                "submit": await bob.call_tool("submit_analysis", {"dataset_url": ALICES_SALES}),
                # and asks for every failed job (a global DLQ figure would tell him about others)
                "failed": (await bob.call_tool("list_failed_jobs", {})).structured_content,
                # and registers an endpoint with a token that is not a bearer token (a header injection)
                "inject": await refused_params(
                    bob, "register_endpoint", {"url": "https://example.com/mcp", "name": "x", "auth": "t\r\nX-Evil: 1"}
                ),
            }

    before = job_count(endpoint)
    found = anyio.run(attacks)

    # Then the dataset reads are refused with the rule, before any S3 call, and no job was created for them
    for name in ("read", "submit"):
        assert found[name].is_error, name
    for name in ("read", "submit"):
        text = found[name].content[0].text
        assert "DatasetAccessDenied: " in text and "apikey%3Auser-bob/" in text and "rowCount" not in text, name
    assert job_count(endpoint) == before
    # And bob's listing holds only his own (none), nothing about the shared DLQ
    assert found["failed"] == {"failedJobs": []}
    # And the injected token is refused as invalid params (naming the field, not echoing it), nothing registered
    assert "auth" in found["inject"]
    assert "X-Evil" not in found["inject"]
    items = boto3.client("dynamodb").scan(TableName=endpoint.local.table_name("MonitorTable"))["Items"]
    assert items == []

    # When bob sends a body nested 5,000 deep, and a JWT whose header's alg is a list
    deep = post(endpoint, endpoint.bob_key, b"[" * 5000 + b"]" * 5000)
    header = b'{"alg": ["RS256"], "kid": "k"}'.hex()
    forged = post(endpoint, f"{header}.e30.c2ln", json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"}).encode())

    # Then the first is a 400 parse error before any parser recursed, the second an ordinary 401
    assert deep.status_code == 400 and deep.json()["error"]["code"] == -32700
    assert forged.status_code == 401
