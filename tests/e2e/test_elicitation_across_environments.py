"""A question asked by one execution environment of McpServer is answered through another, in the Lambda-shaped
runtime (the build output, each environment its own sandboxed process tree): the first round of a large
submit_analysis (MCP 2026-07-28 `input_required`) is served by one environment, which is then kept busy, so the
retry goes to a second one, started for it. The retry is accepted because every environment opens the
requestState with the key they share (RequestStateSecret); with a key of each process's own
(`RequestStateSecurity.ephemeral()`) the second would refuse it as "Invalid or expired requestState".

In the 2025-11-25 era the question goes out on the call's own event stream and the environment serving the call
waits; the client's answer, a POST of its own, is served by another environment, which stores it in RateLimitTable
for the waiting call (mcp_backend/mcp/open_stream.py)."""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import ElicitResult

from devstack.__main__ import issue_dev_keys
from tests.e2e.conftest import wait_until
from tests.functions.test_mcp_elicitation import ACCEPTED, HEADERS, LARGE, STATELESS_ERA, call

pytestmark = pytest.mark.e2e


def post(url: str, key: str, body: dict[str, Any]) -> dict[str, Any]:
    headers = {
        **HEADERS,
        "authorization": f"Bearer {key}",
        "mcp-protocol-version": STATELESS_ERA,
        "mcp-method": body["method"],
        "mcp-name": body["params"]["name"],
    }
    response = httpx.post(url, json=body, headers=headers, timeout=60)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def test_a_retry_answered_by_another_execution_environment_is_accepted(start_stack):
    # Given the product stack in the Lambda runtime, McpServer's first execution environment warm
    stack = start_stack(runtime="lambda")
    [key] = issue_dev_keys(stack).values()
    [web] = stack.web_functions.values()
    pool = stack.environment.lambda_runtime.pool(web.spec.logical_id)
    url = f"{web.url}/mcp"

    # When a user submits a large analysis, which the first environment answers with a question
    question = post(url, key, call(LARGE))["result"]
    [first] = pool.environments()
    assert question["resultType"] == "input_required", question
    # The Function URL returns it to the pool once the response is sent
    assert wait_until(lambda: pool.idle_environments() == [first])
    # And that environment is busy (held here) when the user's answer comes back with the sealed state
    with pool.environment() as held:
        assert held is first
        retry = call(LARGE, {"inputResponses": ACCEPTED, "requestState": question["requestState"]})
        answer = post(url, key, retry)
        # Then the answer was served by a second environment, another process started for it
        [second] = [env for env in pool.environments() if env is not first]
        assert second.id != first.id and second.process is not None and first.process is not None
        assert second.process.pid != first.process.pid

    # And it opened the first one's requestState and queued the job
    assert "error" not in answer, answer["error"]
    result = answer["result"]
    assert result.get("isError") is not True, result
    assert result["structuredContent"]["status"] == "PENDING"
    assert result["structuredContent"]["jobId"]


def test_a_2025_era_answer_is_received_by_another_execution_environment(start_stack):
    # Given the product stack in the Lambda runtime, and a 2025-11-25 client (the SDK's) that declared elicitation
    # and confirms every question
    stack = start_stack(runtime="lambda")
    [key] = issue_dev_keys(stack).values()
    [web] = stack.web_functions.values()
    pool = stack.environment.lambda_runtime.pool(web.spec.logical_id)
    questions: list[Any] = []

    async def confirm(context: Any, params: Any) -> ElicitResult:
        questions.append(params)
        return ElicitResult(action="accept", content={"confirm": True})

    async def scenario() -> Any:
        headers = {"authorization": f"Bearer {key}"}
        async with httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(30.0, read=120.0)) as http:
            client = Client(streamable_http_client(f"{web.url}/mcp", http_client=http), mode="legacy")
            client.elicitation_callback = confirm
            async with client:
                return await client.call_tool("submit_analysis", LARGE)

    # When it submits a large analysis: the environment that serves the call waits on it for the answer
    result = anyio.run(scenario)

    # Then the client was asked once, and its answer, a POST of its own, was served by another environment (each
    # serves one request at a time), another process, which handed it to the waiting call: the job is queued
    assert len(questions) == 1
    environments = pool.environments()
    assert len(environments) >= 2
    assert len({env.process.pid for env in environments if env.process is not None}) >= 2
    assert not result.is_error, result.content
    assert result.structured_content["status"] == "PENDING"
