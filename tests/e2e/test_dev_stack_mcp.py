"""`make dev`'s MCP endpoint: the McpServer Function URL served from its start script, on loopback,
against the local stack, with a dev API key; a job submitted through it completes via the worker."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from devstack.__main__ import banner, issue_dev_keys
from tests.e2e.conftest import Endpoint, mcp_client
from tests.kinesis import stream_json

pytestmark = pytest.mark.e2e


@pytest.fixture
def dev_endpoint(start_stack) -> tuple[object, Endpoint, str]:
    """The product stack as make dev starts it, its served MCP endpoint, and a dev API key."""
    stack = start_stack()
    [key] = issue_dev_keys(stack).values()
    [web] = stack.web_functions.values()
    return stack, Endpoint(url=f"{web.url}/mcp", alice_key=key, bob_key=key, local=stack.environment), key


def test_dev_stack_serves_the_mcp_endpoint_and_a_job_completes_through_it(dev_endpoint):
    # Given the product stack as make dev starts it, with a dev API key
    stack, endpoint, key = dev_endpoint

    # When an MCP client submits an analysis, the stack runs its event sources, and the client asks for the job
    async def submit() -> str:
        async with mcp_client(endpoint, "legacy") as client:
            result = await client.call_tool(
                "submit_analysis", {"dataset_url": "s3://local-datasets/apikey%3Adev-user/sales.csv"}
            )
            return result.structured_content["jobId"]

    job_id = asyncio.run(submit())
    stack.settle()

    async def fetch() -> dict:
        async with mcp_client(endpoint, "legacy") as client:
            return (await client.call_tool("get_job", {"job_id": job_id})).structured_content

    job = asyncio.run(fetch())

    # Then the job ran through the worker, and the banner shows the URL and the key
    assert (job["status"], job["result"]["rowCount"]) == ("SUCCEEDED", 6)
    text = banner(stack, 1.0, {"McpServerUrl": key})
    assert endpoint.url in text and key in text


def test_dev_stack_mcp_endpoint_rejects_a_missing_key(start_stack):
    # Given the served endpoint
    stack = start_stack()
    [web] = stack.web_functions.values()

    # When a request comes without a key
    response = httpx.post(
        f"{web.url}/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        headers={"accept": "application/json, text/event-stream"},
    )

    # Then it is refused as the deployed endpoint would refuse it
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Bearer")


def test_each_mcp_tool_call_puts_one_call_log_record_for_its_caller(dev_endpoint):
    # Given the served endpoint and a caller with a dev key
    stack, endpoint, _ = dev_endpoint

    # When the caller makes one successful call and one that fails as a tool error
    async def calls() -> None:
        async with mcp_client(endpoint, "2026-07-28") as client:
            await client.call_tool(
                "submit_analysis", {"dataset_url": "s3://local-datasets/apikey%3Adev-user/sales.csv"}
            )
            await client.call_tool("get_job", {"job_id": "job-nobody-knows"})

    asyncio.run(calls())

    # Then the call log holds one tool_call and one tool_error record for that user, without payloads
    records = stream_json(stack.environment.stack.ensure("CallLogStream").ref)
    mine = sorted((r["eventType"], r["toolName"]) for r in records if r.get("userId") == "apikey:dev-user")
    assert mine == [("tool_call", "submit_analysis"), ("tool_error", "get_job")]
    assert all("local-datasets" not in json.dumps(r) for r in records)
