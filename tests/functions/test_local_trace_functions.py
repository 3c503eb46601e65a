"""The local stack's traces name the function each span ran in: a job submitted through the McpServer app and run by
ToolWorker, both in this process (one tracer provider), is one trace in `traces.jsonl` whose spans carry their
function's resource (`service.name` the logical id, `faas.name` the function's name), and `make trace` prints the
function on each line of the tree."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import boto3
import httpx
import pytest

from devstack.__main__ import print_trace
from devstack.front_doors.function_urls import InvocationPerRequest
from devstack.traces import start_recording, stop_recording
from mcp_backend.api_keys import Principal
from mcp_backend.config import McpSettings, load_settings
from mcp_backend.mcp.server import create_app
from tests.unit.endpoint_fakes import HOST, EveryoneIs, ServedInProcess

CLIENT_TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{CLIENT_TRACE_ID}-00f067aa0ba902b7-01"
HEADERS = {
    "accept": "application/json, text/event-stream",
    "content-type": "application/json",
    "authorization": "Bearer alices-key",
    "mcp-protocol-version": "2025-11-25",
    "traceparent": TRACEPARENT,
}
ALICE = EveryoneIs(Principal(user_id="user-alice"))


@pytest.fixture
def trace_file(tmp_path: Path) -> Iterator[Path]:
    """Spans of this process recorded as `make dev` records them (Tracing=otlp), in a file of the test's own."""
    path = tmp_path / "traces.jsonl"
    start_recording(path, "otlp")
    yield path
    stop_recording()


def submit_job(local: Any) -> None:
    """One analyze_dataset tools/call as a task (always queued for the worker), in the client's trace, to the
    McpServer app served as the local stack serves it (each request an invocation of McpServer)."""
    spec = local.stack.function("McpServer")
    app = create_app(load_settings(McpSettings, spec.environment), authenticator=ALICE, client_factory=boto3.client)
    arguments = {"dataset_url": "s3://local-datasets/user-alice/sales.csv"}
    body = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": "analyze_dataset", "arguments": arguments, "task": {"ttl": 60000}},
    }

    async def call() -> httpx.Response:
        async with ServedInProcess(InvocationPerRequest(app, spec)) as client:
            return await client.post(f"https://{HOST}/mcp", json=body, headers=HEADERS)

    response = anyio.run(call)
    assert response.status_code == 200, response.text


def test_each_span_names_its_function_in_the_trace_file_and_in_make_trace(local, trace_file, capsys):
    # Given the endpoint's app and the worker, both run in this process by the local stack, recording spans
    # When a client submits a job in its trace, and the job queue's messages are delivered to ToolWorker
    submit_job(local)
    outcomes = local.sqs_source_for("ToolWorker").drain()
    assert [(outcome.invoked, outcome.failed_ids, outcome.error) for outcome in outcomes if outcome.received] == [
        (True, (), None)
    ]

    # Then every span of the trace in traces.jsonl carries the resource of the function it ran in
    spans = [json.loads(line) for line in trace_file.read_text().splitlines()]
    traced = [span for span in spans if span["traceId"] == CLIENT_TRACE_ID]
    functions = {span["name"]: span["resource"].get("service.name") for span in traced}
    assert functions["POST /mcp"] == "McpServer"
    assert functions["tools/call analyze_dataset"] == "McpServer"
    assert functions["send JobQueue"] == "McpServer"
    assert functions["process JobQueue"] == "ToolWorker"
    assert functions["execute_tool analyze_dataset"] == "ToolWorker"
    assert {span["resource"]["faas.name"] for span in traced} == {
        local.stack.function("McpServer").name,
        local.stack.function("ToolWorker").name,
    }
    # And the AWS calls each function made are its own: the endpoint's send, the worker's writes
    aws_calls = {(span["name"], span["resource"]["service.name"]) for span in traced if span["kind"] == "client"}
    assert ("SQS.SendMessage", "McpServer") in aws_calls or ("SQS.SendMessageBatch", "McpServer") in aws_calls
    assert any(name.startswith("DynamoDB.") and function == "ToolWorker" for name, function in aws_calls)

    # When `make trace` prints the trace
    capsys.readouterr()  # what the functions logged
    assert print_trace(trace_file, CLIENT_TRACE_ID, None) == 0
    printed = capsys.readouterr().out.splitlines()

    # Then its header names the column, and each span's line names its function before the span
    assert "function" in printed[1] and printed[1].rstrip().endswith("| span")
    by_span = {
        line.split(" | ", 1)[1].strip().split("  [")[0]: line.split(" | ", 1)[0].split()[-1] for line in printed[2:]
    }
    assert by_span["POST /mcp"] == "McpServer"
    assert by_span["process JobQueue"] == "ToolWorker"
    assert set(by_span.values()) == {"McpServer", "ToolWorker"}
