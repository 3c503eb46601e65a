"""One trace per tool call on the local stack (Tracing=otlp, in-process runtime, spans in a JSON-lines file): a
job submitted with a client's `traceparent` is followed from the endpoint's request through the queue to the
worker's tool run, with the OpenTelemetry MCP and messaging semantic-convention attributes; `make trace` prints it."""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from devstack.__main__ import issue_dev_keys
from devstack.__main__ import main as devstack_main
from devstack.traces import read_trace
from tests.e2e.conftest import Endpoint, wait_until
from tests.e2e.test_probe_pipeline import SCHEDULE, product_endpoint, register_with_alices_key, servers

pytestmark = pytest.mark.e2e
__all__ = ["servers"]  # the fixture, shared with the probe pipeline's tests

MODERN = "2026-07-28"
CLIENT_TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{CLIENT_TRACE_ID}-{CLIENT_SPAN_ID}-01"
DATASET = "s3://local-datasets/apikey%3Adev-user/sales.csv"
ROOT = Path(__file__).resolve().parents[2]
# A line of `make trace`: duration, start after the trace's first span, the function it ran in, the span's name
# indented by its depth.
TREE_LINE = re.compile(r"^\s*[\d.]+ ms\s+[+-][\d.]+ ms  (\S+) *\| ( *)([^\[]+?)(?:  \[.*)?$")


@pytest.fixture
def traced(start_stack, tmp_path) -> tuple[Any, Endpoint, Path]:
    """The product stack with Tracing=otlp (its spans in a file), its MCP endpoint with a dev key."""
    trace_file = tmp_path / "traces.jsonl"
    stack = start_stack(runtime="inprocess", parameters={"Tracing": "otlp"}, trace_file=trace_file)
    [key] = issue_dev_keys(stack).values()
    [web] = stack.web_functions.values()
    return stack, Endpoint(url=f"{web.url}/mcp", alice_key=key, bob_key=key, local=stack.environment), trace_file


def call_tool(
    endpoint: Endpoint, name: str, arguments: dict[str, Any], meta: dict[str, Any], headers: dict[str, str]
) -> dict[str, Any]:
    """One 2026-07-28 tools/call with `meta` in its params._meta and `headers` on the request: its result."""
    body = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {
            "name": name,
            "arguments": arguments,
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": MODERN,
                "io.modelcontextprotocol/clientCapabilities": {},
                **meta,
            },
        },
    }
    routing = {"mcp-protocol-version": MODERN, "mcp-method": "tools/call", "mcp-name": name}
    response = httpx.post(
        endpoint.url, json=body, headers=endpoint.headers(endpoint.alice_key, **routing, **headers), timeout=60
    )
    assert response.status_code == 200, response.text
    if response.headers["content-type"].startswith("application/json"):
        return response.json()["result"]
    messages = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: ")]
    return next(message for message in messages if message.get("id") == 7)["result"]


def all_spans(trace_file: Path) -> list[dict[str, Any]]:
    if not trace_file.exists():
        return []
    return [json.loads(line) for line in trace_file.read_text().splitlines() if line.strip()]


def names(spans: list[dict[str, Any]]) -> set[str]:
    return {span["name"] for span in spans}


def named(spans: list[dict[str, Any]], name: str) -> dict[str, Any]:
    matching = [span for span in spans if span["name"] == name]
    assert len(matching) == 1, (name, [span["name"] for span in spans])
    return matching[0]


def test_a_job_submitted_with_a_traceparent_is_one_trace_from_the_request_to_the_worker(traced):
    # Given the stack with tracing on, and a client whose span is CLIENT_SPAN_ID in trace CLIENT_TRACE_ID
    stack, endpoint, trace_file = traced

    # When it submits an analysis with its traceparent (in params._meta and as the HTTP header), and the queue is
    # delivered to the worker
    result = call_tool(
        endpoint,
        "submit_analysis",
        {"dataset_url": DATASET},
        {"traceparent": TRACEPARENT},
        {"traceparent": TRACEPARENT},
    )
    job_id = result["structuredContent"]["jobId"]
    stack.settle()
    # (a span is written when it ends: the request's after its answer, the worker's after its tool's)
    assert wait_until(lambda: {"POST /mcp", "process JobQueue"} <= names(all_spans(trace_file)))

    # Then one trace, the client's, holds the request, its MCP call, the queue hop and the worker's run
    spans = read_trace(trace_file, CLIENT_TRACE_ID)
    request = named(spans, "POST /mcp")
    mcp_call = named(spans, "tools/call submit_analysis")
    send = named(spans, "send JobQueue")
    process = named(spans, "process JobQueue")
    tool_run = named(spans, "execute_tool analyze_dataset")
    assert (request["kind"], request["parentSpanId"]) == ("server", CLIENT_SPAN_ID)
    assert request["attributes"]["app.principal.tier"] and request["attributes"]["http.response.status_code"] == 200
    # ... the SDK's MCP span with the MCP semantic conventions, parented by the client's _meta traceparent
    assert mcp_call["parentSpanId"] == CLIENT_SPAN_ID
    assert {key: mcp_call["attributes"].get(key) for key in ("mcp.method.name", "gen_ai.tool.name")} == {
        "mcp.method.name": "tools/call",
        "gen_ai.tool.name": "submit_analysis",
    }
    assert (mcp_call["attributes"]["jsonrpc.request.id"], mcp_call["attributes"]["mcp.protocol.version"]) == (
        "7",
        MODERN,
    )
    assert mcp_call["attributes"]["job.id"] == job_id
    # ... the queue hop: the producer span under the call, the consumer span its child, the tool run under that
    assert (send["kind"], send["attributes"]["messaging.system"], send["attributes"]["messaging.operation.type"]) == (
        "producer",
        "aws_sqs",
        "send",
    )
    spans_by_id = {span["spanId"]: span for span in spans}
    assert mcp_call["spanId"] in ancestors(send, spans_by_id)
    assert (process["kind"], process["parentSpanId"]) == ("consumer", send["spanId"])
    assert process["attributes"]["job.id"] == job_id and process["attributes"]["job.queue_wait_ms"] >= 0
    assert tool_run["parentSpanId"] == process["spanId"]
    assert tool_run["attributes"]["gen_ai.tool.name"] == "analyze_dataset"
    # ... and the AWS calls on both sides: the job's PENDING write and the send; the worker's claim and end
    aws_calls = [span for span in spans if span["attributes"].get("rpc.system") == "aws-api"]
    assert {"SQS.SendMessage", "DynamoDB.UpdateItem"} <= {span["name"] for span in aws_calls}
    assert any(process["spanId"] in ancestors(span, spans_by_id) for span in aws_calls)
    # ... the tool's own read of the dataset included (a client the tool builds itself)
    assert any(s["name"] == "S3.GetObject" and tool_run["spanId"] in ancestors(s, spans_by_id) for s in aws_calls)

    # And `make trace ID=...` prints it as a tree with durations; `JOB=...` finds the same one by the job's id
    for argv in (["trace", CLIENT_TRACE_ID], ["trace", "--job", job_id]):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert devstack_main([*argv, "--file", str(trace_file)]) == 0
        tree = out.getvalue()
        assert tree.startswith(f"trace {CLIENT_TRACE_ID}: {len(spans)} spans")
        lines = [match for match in map(TREE_LINE.match, tree.splitlines()) if match]
        depth = {match[3]: len(match[2]) // 2 for match in lines}
        function = {match[3]: match[1] for match in lines}
        assert function["POST /mcp"] == function["send JobQueue"] == "McpServer"
        assert function["process JobQueue"] == function["execute_tool analyze_dataset"] == "ToolWorker"
        assert depth["POST /mcp"] == depth["tools/call submit_analysis"] == 0  # both children of the client's span
        assert depth["execute_tool analyze_dataset"] == depth["process JobQueue"] + 1 > depth["send JobQueue"]


def ancestors(span: dict[str, Any], by_id: dict[str, dict[str, Any]]) -> list[str]:
    found = []
    parent = span["parentSpanId"]
    while parent in by_id:
        found.append(parent)
        parent = by_id[parent]["parentSpanId"]
    return found


def test_a_malformed_traceparent_starts_a_new_trace_and_the_call_is_answered(traced):
    # Given the stack with tracing on
    _stack, endpoint, trace_file = traced

    # When a call carries a malformed traceparent, in the header and in params._meta
    bad = "00-not-a-trace-id-01"
    result = call_tool(endpoint, "list_failed_jobs", {}, {"traceparent": bad}, {"traceparent": bad})

    # Then it is answered as any call, and its spans are a new trace of their own, rooted at the request
    assert not result.get("isError"), result
    assert wait_until(lambda: {"POST /mcp", "tools/call list_failed_jobs"} <= names(all_spans(trace_file)))
    spans = all_spans(trace_file)
    request = named(spans, "POST /mcp")
    assert request["parentSpanId"] is None
    assert named(spans, "tools/call list_failed_jobs")["traceId"] == request["traceId"]


def test_no_span_attribute_holds_a_key_a_query_string_or_the_dataset(traced):
    # Given the stack with tracing on, and a dataset URL with a query string that looks like a credential
    stack, endpoint, trace_file = traced
    secret_query = "X-Amz-Signature=abc123secretsig"

    # When a job is submitted and run, and a synchronous analysis of the dataset runs too
    traceparent = {"traceparent": TRACEPARENT}
    call_tool(endpoint, "submit_analysis", {"dataset_url": DATASET}, traceparent, traceparent)
    call_tool(endpoint, "analyze_dataset", {"dataset_url": f"{DATASET}?{secret_query}"}, traceparent, traceparent)
    stack.settle()
    assert wait_until(lambda: "process JobQueue" in names(all_spans(trace_file)))

    # Then no attribute of any span (or of the file) holds the API key, the query string or the dataset's rows
    text = trace_file.read_text()
    # (the stack seeds its datasets from events/datasets)
    dataset_rows = (ROOT / "events" / "datasets" / "sales.csv").read_text().splitlines()[1:]
    assert endpoint.alice_key not in text
    assert secret_query not in text and "X-Amz-Signature" not in text
    assert dataset_rows and not any(row in text for row in dataset_rows)


def test_a_probe_is_one_trace_from_the_dispatch_through_the_probe_to_its_record(start_stack, servers, tmp_path):
    # Given the stack with tracing on, and its MCP app on loopback registered as an endpoint to probe
    trace_file = tmp_path / "traces.jsonl"
    stack = start_stack(runtime="inprocess", parameters={"Tracing": "otlp"}, trace_file=trace_file)
    registered = register_with_alices_key(product_endpoint(stack, servers))

    # When the probe schedule fires and everything settles
    assert stack.fire(SCHEDULE) == 1
    stack.settle()
    assert wait_until(lambda: any(s["name"] == "record probe results" for s in all_spans(trace_file)))

    # Then the dispatch, the invocation, the probe and the record of its result are one trace, each the parent of
    # the next (the context rides in the probe's payload and back in the destination's envelope), and the record
    # is also linked to the probe it stores
    spans = all_spans(trace_file)
    dispatch = named(spans, "dispatch probes")
    invoke = named(spans, "invoke ProbeWorker")
    probed = named(spans, "probe endpoint")
    record = named(spans, "record probe results")
    assert len({span["traceId"] for span in (dispatch, invoke, probed, record)}) == 1
    assert (invoke["parentSpanId"], probed["parentSpanId"], record["parentSpanId"]) == (
        dispatch["spanId"],
        invoke["spanId"],
        probed["spanId"],
    )
    assert record["links"] == [{"traceId": probed["traceId"], "spanId": probed["spanId"]}]
    assert probed["attributes"]["probe.server_id"] == registered["serverId"]
    assert (invoke["kind"], probed["kind"], record["kind"]) == ("producer", "consumer", "consumer")
