"""`make dev`'s MCP endpoint: the McpServer Function URL served from its start script, on loopback,
against the local stack, with a dev API key; a job submitted through it completes via the worker."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import time

import httpx
import pytest
from mcp.shared.exceptions import MCPError

from devstack.__main__ import banner, issue_dev_keys
from tests.conftest import load_event
from tests.e2e.conftest import Endpoint, mcp_client, wait_until
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
        timeout=60,
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

    # Then the call log holds (once the endpoint's shipper has sent them, off the request path) one tool_call and
    # one tool_error record for that user, without payloads
    def mine() -> list[tuple[str, str]]:
        records = stream_json(stack.environment.stack.ensure("CallLogStream").ref)
        return sorted((r["eventType"], r["toolName"]) for r in records if r.get("userId") == "apikey:dev-user")

    assert wait_until(lambda: len(mine()) >= 2)
    assert mine() == [("tool_call", "submit_analysis"), ("tool_error", "get_job")]
    records = stream_json(stack.environment.stack.ensure("CallLogStream").ref)
    assert all("local-datasets" not in json.dumps(r) for r in records)


def test_dev_stack_allows_its_own_loopback_origins_and_no_other(start_stack):
    # Given the served endpoint and a dev key
    stack = start_stack()
    [key] = issue_dev_keys(stack).values()
    [web] = stack.web_functions.values()
    port = web.url.rsplit(":", 1)[1]

    def status(origin: str) -> int:
        headers = {"accept": "application/json, text/event-stream", "authorization": f"Bearer {key}", "origin": origin}
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
        return httpx.post(f"{web.url}/mcp", json=body, headers=headers, timeout=60).status_code

    # When a browser page on the stack's own origin, and one on another loopback port, call it
    own = [status(f"http://127.0.0.1:{port}"), status(f"http://localhost:{port}")]
    other = status("http://127.0.0.1:1")

    # Then the stack's own origins are allowed and the other is refused
    assert own == [200, 200]
    assert other == 403


def test_in_process_each_functions_lines_name_that_function_and_its_request(start_stack):
    # Given the in-process stack (one Python process for every function and the served endpoint), whose
    # CallLogAnalyzer has just run with its own Lambda context
    from mcp_backend.observability import logger

    stack = start_stack(runtime="inprocess")
    [key] = issue_dev_keys(stack).values()
    [web] = stack.web_functions.values()
    buffer = io.StringIO()
    handler = logging.StreamHandler(buffer)
    handler.setFormatter(logger.registered_formatter)
    logger.addHandler(handler)
    try:
        stack.environment.invoke("CallLogAnalyzer", load_event("call_log_analyzer/error-burst.json"))
        analyzer_lines = [json.loads(line) for line in buffer.getvalue().splitlines() if line.startswith("{")]

        # When the endpoint answers two requests
        for _ in range(2):
            body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
            headers = {"accept": "application/json, text/event-stream", "authorization": f"Bearer {key}"}
            assert httpx.post(f"{web.url}/mcp", json=body, headers=headers, timeout=60).status_code == 200
        deadline = time.monotonic() + 5
        while buffer.getvalue().count('"mcp request"') < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        logger.removeHandler(handler)

    # Then the analyzer's lines name the analyzer, and the endpoint's lines name McpServer and a request of its own
    analyzer = stack.environment.stack.function("CallLogAnalyzer")
    mcp_server = stack.environment.stack.function("McpServer")
    assert {line.get("function_name") for line in analyzer_lines} == {analyzer.name}
    request_lines = [json.loads(line) for line in buffer.getvalue().splitlines() if '"mcp request"' in line]
    assert [line.get("function_name") for line in request_lines] == [mcp_server.name] * 2
    assert "function_arn" not in request_lines[0] or request_lines[0]["function_arn"] != analyzer.arn
    request_ids = [line.get("function_request_id") for line in request_lines]
    analyzer_ids = {line.get("function_request_id") for line in analyzer_lines}
    assert None not in request_ids and len(set(request_ids)) == 2 and not set(request_ids) & analyzer_ids


@pytest.mark.parametrize("fixtures", [True, False])
def test_make_dev_serves_the_conformance_fixtures_only_when_asked(start_stack, fixtures):
    # Given make dev in-process, with CONFORMANCE=1 (conformance_fixtures) or without
    stack = start_stack(runtime="inprocess", conformance_fixtures=fixtures)
    [key] = issue_dev_keys(stack).values()
    [web] = stack.web_functions.values()
    endpoint = Endpoint(url=f"{web.url}/mcp", alice_key=key, bob_key=key, local=stack.environment)

    async def read() -> str:
        async with mcp_client(endpoint, "legacy") as client:
            # When a client reads the suite's static text resource
            try:
                return (await client.read_resource("test://static-text")).contents[0].text
            except MCPError as refused:
                return refused.error.message

    # Then only the stack started with the fixtures has it
    expected = "This is the content of the static text resource." if fixtures else "Resource not found"
    assert asyncio.run(read()) == expected
