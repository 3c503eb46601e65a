"""A question asked by one execution environment of McpServer is answered through another, in the Lambda-shaped
runtime (the build output, each environment its own sandboxed process tree): the first round of a large
submit_analysis (MCP 2026-07-28 `input_required`) is served by one environment, which is then kept busy, so the
retry goes to a second one, started for it. The retry is accepted because every environment opens the
requestState with the key they share (RequestStateSecret); with a key of each process's own
(`RequestStateSecurity.ephemeral()`) the second would refuse it as "Invalid or expired requestState"."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

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
