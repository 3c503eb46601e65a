"""McpServer from the build output in the Lambda runtime, shut down as Lambda shuts an environment down (SIGTERM to
the runtime, SIGKILL 300 ms later): what it still held of its tool calls, their ToolName metrics and call-log
records, goes out before it ends."""

from __future__ import annotations

import json

import httpx
import pytest

from devstack.__main__ import issue_dev_keys

pytestmark = pytest.mark.e2e
UNKNOWN_JOB = "0123456789abcdef0123456789abcdef"


def tool_metric_blobs(text: str) -> list[dict]:
    blobs = []
    for line in text.splitlines():
        start = line.find('{"_aws"')
        if start >= 0 and '"ToolInvocation"' in line:
            blobs.append(json.loads(line[start:]))
    return blobs


def test_a_tool_calls_metrics_and_call_log_record_pending_at_shutdown_go_out_on_the_sigterm(start_stack, capfd):
    # Given the stack in the Lambda runtime and its served endpoint
    stack = start_stack(runtime="lambda")
    [key] = issue_dev_keys(stack).values()
    [web] = stack.web_functions.values()
    headers = {
        "authorization": f"Bearer {key}",
        "accept": "application/json, text/event-stream",
        "content-type": "application/json",
    }
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "get_job", "arguments": {"job_id": UNKNOWN_JOB}}}  # fmt: skip

    # When one tool call is answered, and the stack then stops
    response = httpx.post(f"{web.url}/mcp", json=body, headers=headers, timeout=60)
    written_with_the_answer = tool_metric_blobs(capfd.readouterr().out)
    stack.stop()
    output = capfd.readouterr()

    # Then the call's metrics were not written with its answer, and both they and its call-log record went out
    # when the environment shut down
    assert response.status_code == 200
    assert written_with_the_answer == []
    assert [(blob["ToolName"], blob["ToolInvocation"]) for blob in tool_metric_blobs(output.out)] == [
        ("get_job", [1.0])
    ], output.out[-3000:]
    assert "mcp-call-log: 1 records written, 0 dropped" in output.out + output.err
