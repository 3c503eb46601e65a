"""mcp_backend.tracing: nothing with tracing off; with it on, W3C context from carriers (a malformed one starts a new
trace), attributes that never carry credentials, payloads or query strings, and the OTLP/JSON exporter."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import anyio
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from devstack.__main__ import dev_parameters
from mcp_backend.config import TracingSettings
from mcp_backend.mcp.server import create_app
from mcp_backend.snapstart import refresh_after_restore
from mcp_backend.tracing import propagation, state
from mcp_backend.tracing import setup as tracing_setup
from mcp_backend.tracing import spans as tracing_spans
from mcp_backend.tracing.otlp_export import OtlpJsonExporter
from tests.loopback_http import answer_empty, serving
from tests.unit.endpoint_fakes import SETTINGS, EveryoneIsAlice, RoomyRateTable, ServedInProcess

ROOT = Path(__file__).resolve().parents[2]
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
_MEMORY = InMemorySpanExporter()
_attached: list[bool] = []


@pytest.fixture
def recorded() -> Iterator[InMemorySpanExporter]:
    """Tracing on, with every span of this process kept in memory (the process's one SDK tracer provider)."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    if not _attached:
        provider.add_span_processor(SimpleSpanProcessor(_MEMORY))
        _attached.append(True)
    _MEMORY.clear()
    tracing_setup.reset()
    tracing_setup.configure(TracingSettings(tracing_mode="otlp"))
    yield _MEMORY
    tracing_setup.reset()
    tracing_setup.configure(TracingSettings(tracing_mode="off"))


def test_with_tracing_off_the_worker_loads_no_opentelemetry_and_spans_are_one_shared_no_op():
    # Given a fresh interpreter and tracing off (the default)
    script = """
import sys
from mcp_backend.tracing import aws_calls, propagation, spans
from mcp_backend.calllog import analyzer
from mcp_backend.jobs import worker
from mcp_backend.observability import instrumented_handler

instrumented_handler()(lambda event, context: None)
client = object()
print(__import__("json").dumps({
    "loaded": sorted(name for name in sys.modules if name.split(".")[0] in ("opentelemetry", "httpx")),
    "no_span": spans.span("x") is spans.NO_SPAN,
    "attributes": propagation.sqs_message_attributes(),
    "client": aws_calls.instrument_client(client) is client,
    "context": propagation.extract({"traceparent": "00-TRACE-PARENT-01"}) is None,
}))
""".replace("TRACE", TRACE_ID).replace("PARENT", PARENT_ID)
    environment = {key: value for key, value in os.environ.items() if key != "TRACING_MODE"}

    # When the worker's modules load and a handler is decorated
    out = subprocess.run(
        [sys.executable, "-c", script],
        env={**environment, "PYTHONPATH": str(ROOT / "layers" / "shared")},
        capture_output=True,
        text=True,
        check=True,
    ).stdout

    # Then no OpenTelemetry module (nor the exporter's httpx) is imported, spans are the shared no-op, and no carrier
    # is read or written
    assert json.loads(out.splitlines()[-1]) == {
        "loaded": [],
        "no_span": True,
        "attributes": {},
        "client": True,
        "context": True,
    }


@pytest.mark.parametrize(
    "traceparent",
    [
        "",
        "garbage",
        "00-not-a-trace-id-01",
        f"00-{'0' * 32}-{PARENT_ID}-01",  # the all-zero trace id is invalid
        f"00-{TRACE_ID}-{'0' * 16}-01",  # so is the all-zero span id
        f"00-{TRACE_ID.upper()}-{PARENT_ID}-01x",
        12345,
    ],
)
def test_a_malformed_traceparent_starts_a_new_trace(recorded, traceparent):
    # Given a carrier with a malformed traceparent
    carrier = {"traceparent": traceparent, "tracestate": "a=b"}

    # When a span starts with what the carrier names as its parent
    with tracing_spans.span("request", kind="server", parent=propagation.extract(carrier)):
        pass

    # Then it is the root of a new trace, not an error
    [span] = recorded.get_finished_spans()
    assert span.parent is None
    assert span.get_span_context().trace_id != 0


def test_a_wellformed_traceparent_is_the_parent(recorded):
    # Given a client's traceparent
    carrier = {"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"}

    # When a span starts under it, and a message is sent inside it
    with tracing_spans.span("request", kind="server", parent=propagation.extract(carrier)):
        attributes = propagation.sqs_message_attributes()

    # Then the span is in the client's trace, a child of its span, and the message carries the span onward
    [span] = recorded.get_finished_spans()
    assert (f"{span.get_span_context().trace_id:032x}", f"{span.parent.span_id:016x}") == (TRACE_ID, PARENT_ID)
    sent = attributes["traceparent"]["StringValue"]
    assert sent == f"00-{TRACE_ID}-{span.get_span_context().span_id:016x}-01"


def test_inside_an_unsampled_trace_nothing_is_recorded_and_the_trace_travels_on_unsampled(recorded):
    # Given a client's traceparent that is not sampled
    carrier = {"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-00"}

    # When the request's span starts under it, a step's span inside that, and a message is sent inside the step
    with tracing_spans.span("request", kind="server", parent=propagation.extract(carrier)) as request:
        with tracing_spans.span("guard auth", attributes={"app.step": "auth"}) as step:
            step.set_attribute("app.principal.tier", "pro")
            attributes = propagation.sqs_message_attributes()

    # Then no span is recorded, and the message carries the client's trace, still not sampled
    assert len(recorded.get_finished_spans()) == 0
    assert (request.recording, step.recording) == (False, False)
    version, trace_id, _, flags = attributes["traceparent"]["StringValue"].split("-")
    assert (version, trace_id, flags) == ("00", TRACE_ID, "00")


def test_a_worker_record_continues_the_senders_trace_from_its_attribute_or_the_aws_trace_header(recorded):
    # Given an SQS record with the traceparent attribute, and one with only Lambda's AWSTraceHeader
    with_attribute = {"messageAttributes": {"traceparent": {"stringValue": f"00-{TRACE_ID}-{PARENT_ID}-01"}}}
    xray = f"Root=1-{TRACE_ID[:8]}-{TRACE_ID[8:]};Parent={PARENT_ID};Sampled=1"
    with_header = {"messageAttributes": {}, "attributes": {"AWSTraceHeader": xray}}

    # When the worker's span starts under each record's context
    for record in (with_attribute, with_header):
        with tracing_spans.span("process", kind="consumer", parent=propagation.sqs_record_context(record)):
            pass

    # Then both continue the sender's trace under its span
    spans = recorded.get_finished_spans()
    assert [(f"{s.get_span_context().trace_id:032x}", f"{s.parent.span_id:016x}") for s in spans] == [
        (TRACE_ID, PARENT_ID),
        (TRACE_ID, PARENT_ID),
    ]


def test_an_xray_trace_header_becomes_a_traceparent():
    assert propagation.xray_header_to_traceparent(
        "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=0"
    ) == ("00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-00")
    assert propagation.xray_header_to_traceparent("Root=1-5759e988-bd862e3fe1be46a994272793") is None
    assert propagation.xray_header_to_traceparent("nonsense") is None


def test_span_attributes_never_hold_credentials_payloads_or_query_strings(recorded):
    # Given attributes a careless caller might set
    attributes = {
        "http.request.header.authorization": "Bearer sk-live-1234",
        "app.api_key": "k-1234",
        "aws.session_token": "IQoJb3JpZ2luX2VjEJr",
        "client.password": "hunter2",
        "url.full": "https://data.example.com/sales.csv?X-Amz-Signature=abc123&token=t0k",
        "dataset.rows": [["north", 12]],
        "tool.input": {"dataset_url": "s3://bucket/key"},
        "gen_ai.tool.name": "analyze_dataset",
        "job.attempt": 2,
    }

    # When they are set on a span, at its start and while it runs
    with tracing_spans.span("call", attributes=attributes) as span:
        span.set_attributes(attributes)
        span.set_attribute("url.full", "http://127.0.0.1:9/x?secret=1#frag")
    tracing_spans.annotate(attributes)  # outside a span: nothing to annotate, and no error

    # Then only the safe ones are kept: no credential by name, no query string or fragment, no structure
    [finished] = recorded.get_finished_spans()
    assert dict(finished.attributes or {}) == {
        "url.full": "http://127.0.0.1:9/x",
        "gen_ai.tool.name": "analyze_dataset",
        "job.attempt": 2,
    }


def test_an_exception_in_a_span_records_its_type_not_its_text(recorded):
    # Given a block that fails with a message quoting a payload
    with pytest.raises(ValueError), tracing_spans.span("run"):
        raise ValueError("row 3: north,12,9.5,web")

    # Then the span is an error with the exception's type only
    [span] = recorded.get_finished_spans()
    assert span.attributes["error.type"] == "ValueError"
    assert "north" not in json.dumps([dict(span.attributes or {}), [dict(e.attributes or {}) for e in span.events]])


class _Collector(http.server.BaseHTTPRequestHandler):
    """A loopback OTLP/HTTP receiver: keeps each request's headers and body; answers `status`."""

    received: ClassVar[list[tuple[dict[str, str], bytes]]] = []
    status = 200

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["content-length"]))
        _Collector.received.append(({k.lower(): v for k, v in self.headers.items()}, body))
        answer_empty(self, _Collector.status)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def collector() -> Iterator[str]:
    _Collector.received, _Collector.status = [], 200
    with serving(_Collector) as url:
        yield f"{url}/v1/traces"


def finished_spans(recorded: InMemorySpanExporter) -> Any:
    with tracing_spans.span(
        "POST /mcp", kind="server", parent=propagation.extract({"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"})
    ):
        with tracing_spans.span("send JobQueue", kind="producer", attributes={"job.attempt": 1, "ok": True, "w": 0.5}):
            pass
    return recorded.get_finished_spans()


def test_the_exporter_posts_otlp_json_signed_for_xray(recorded, collector, monkeypatch):
    # Given two finished spans, credentials in the environment, and an exporter signing for X-Ray (to loopback)
    spans = finished_spans(recorded)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
    exporter = OtlpJsonExporter(collector, region="eu-west-1", sign=True)

    # When it exports them
    result = exporter.export(spans)

    # Then one OTLP/JSON request arrived, SigV4-signed for service xray, with the spans' ids in hex and their parents
    assert result == SpanExportResult.SUCCESS
    [(headers, body)] = _Collector.received
    assert headers["content-type"] == "application/json"
    assert headers["authorization"].startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/")
    assert "/eu-west-1/xray/aws4_request" in headers["authorization"]
    [resource_spans] = json.loads(body)["resourceSpans"]
    encoded = {span["name"]: span for span in resource_spans["scopeSpans"][0]["spans"]}
    assert encoded["POST /mcp"]["traceId"] == TRACE_ID and encoded["POST /mcp"]["parentSpanId"] == PARENT_ID
    assert (encoded["POST /mcp"]["kind"], encoded["send JobQueue"]["kind"]) == (2, 4)  # SERVER, PRODUCER
    assert encoded["send JobQueue"]["parentSpanId"] == encoded["POST /mcp"]["spanId"]
    # ... and no span events or status messages, where a library's span would put an exception's text
    assert all("events" not in span and set(span["status"]) == {"code"} for span in encoded.values())
    assert {a["key"]: a["value"] for a in encoded["send JobQueue"]["attributes"]} == {
        "job.attempt": {"intValue": "1"},
        "ok": {"boolValue": True},
        "w": {"doubleValue": 0.5},
    }


def test_a_failed_export_costs_the_batch_never_an_error(recorded, collector):
    # Given a receiver that refuses, and one that is not there
    spans = finished_spans(recorded)
    _Collector.status = 503

    # When spans are exported to each
    refused = OtlpJsonExporter(collector).export(spans)
    unreachable = OtlpJsonExporter("http://127.0.0.1:9/v1/traces", timeout_seconds=1).export(spans)

    # Then each export fails quietly (the spans are lost; nothing raises)
    assert (refused, unreachable) == (SpanExportResult.FAILURE, SpanExportResult.FAILURE)


def test_xray_mode_exports_to_the_regions_otlp_endpoint():
    exporter = OtlpJsonExporter.for_settings(TracingSettings(tracing_mode="xray", aws_region="eu-west-1"))
    assert (exporter.endpoint, exporter.sign) == ("https://xray.eu-west-1.amazonaws.com/v1/traces", True)
    otlp = OtlpJsonExporter.for_settings(
        TracingSettings(tracing_mode="otlp", otel_exporter_otlp_traces_endpoint="http://localhost:4318/v1/traces")
    )
    assert (otlp.endpoint, otlp.sign) == ("http://localhost:4318/v1/traces", False)


def test_make_dev_records_spans_unless_told_otherwise_and_never_in_the_lambda_runtime():
    # Given make dev's parameters for each runtime, with and without a Tracing parameter
    # Then the in-process stack traces by default, a given value wins, and the Lambda runtime keeps off
    assert dev_parameters("inprocess", [])["Tracing"] == "otlp"
    assert dev_parameters("inprocess", ["Tracing=off", "AuthMode=oauth"]) == {"Tracing": "off", "AuthMode": "oauth"}
    assert "Tracing" not in dev_parameters("lambda", [])


def test_a_snapstart_restore_drops_the_exporters_connection_and_credentials(recorded, kept_alive, monkeypatch):
    # Given tracing on with an exporter that exported before the snapshot (its credentials and connection cached)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
    exporter = OtlpJsonExporter(kept_alive, "us-east-1", sign=True)
    spans = finished_spans(recorded)
    assert exporter.export(spans) == SpanExportResult.SUCCESS
    assert exporter._credentials is not None
    monkeypatch.setattr(state.STATE, "exporter", exporter)

    # When the environment is restored from the snapshot, and spans are exported again
    refresh_after_restore()
    assert exporter._credentials is None
    assert exporter.export(spans) == SpanExportResult.SUCCESS

    # Then the second export came over a connection of its own
    assert len({client for client, _ in _KeptAlive.received}) == 2


class _KeptAlive(http.server.BaseHTTPRequestHandler):
    """A loopback OTLP/HTTP/1.1 receiver that keeps connections open, as a collector does; records each request's
    client address. `close_after` set: it closes a connection after that many answers without saying so (a
    receiver that drops an idle connection)."""

    protocol_version = "HTTP/1.1"
    received: ClassVar[list[tuple[tuple[str, int], bytes]]] = []
    close_after: ClassVar[int | None] = None

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["content-length"]))
        _KeptAlive.received.append((self.client_address, body))
        answer_empty(self)
        answered = sum(1 for client, _ in _KeptAlive.received if client == self.client_address)
        if _KeptAlive.close_after is not None and answered >= _KeptAlive.close_after:
            self.close_connection = True

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def kept_alive() -> Iterator[str]:
    _KeptAlive.received, _KeptAlive.close_after = [], None
    with serving(_KeptAlive) as url:
        yield f"{url}/v1/traces"


def test_the_exporter_posts_every_batch_over_one_kept_alive_connection(recorded, kept_alive):
    # Given an exporter and a receiver that keeps connections open
    spans = finished_spans(recorded)
    exporter = OtlpJsonExporter(kept_alive)

    # When it exports three batches
    results = [exporter.export(spans) for _ in range(3)]

    # Then all three arrived whole, over one connection
    assert results == [SpanExportResult.SUCCESS] * 3
    assert [len(json.loads(body)["resourceSpans"][0]["scopeSpans"][0]["spans"]) for _, body in _KeptAlive.received] == [
        2,
        2,
        2,
    ]
    assert len({client for client, _ in _KeptAlive.received}) == 1


def test_a_connection_the_receiver_dropped_while_idle_is_reopened_and_the_batch_sent(recorded, kept_alive):
    # Given a receiver that drops each connection after one answer, without saying so, and an exporter that used one
    _KeptAlive.close_after = 1
    spans = finished_spans(recorded)
    exporter = OtlpJsonExporter(kept_alive)
    assert exporter.export(spans) == SpanExportResult.SUCCESS

    # When it exports the next batch
    result = exporter.export(spans)

    # Then the batch arrived over a new connection
    assert result == SpanExportResult.SUCCESS
    assert len(_KeptAlive.received) == 2
    assert len({client for client, _ in _KeptAlive.received}) == 2


def test_the_local_stack_starts_recording_spans_as_make_dev_runs_it(tmp_path):
    # Given a fresh interpreter as `make dev` starts one: the repository on its path, no layer on it
    script = f"""
import sys
from pathlib import Path
from devstack.traces import start_recording, stop_recording
start_recording(Path({str(tmp_path / "traces.jsonl")!r}), "otlp")
stop_recording()
print("recorded")
"""
    environment = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    root = Path(__file__).resolve().parents[2]

    # When it starts recording spans (tracing on, as make dev's default)
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=environment, cwd=root, check=False
    )

    # Then it records, the layer's tracing put on the path by the stack itself
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "recorded"


def test_a_meta_only_traceparent_links_the_request_span_and_the_mcp_span_both_ways(recorded):
    # Given the endpoint with tracing on
    app = create_app(SETTINGS, authenticator=EveryoneIsAlice(), client_factory=lambda service: RoomyRateTable())
    headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    meta = {"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"}
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "list_endpoints", "_meta": meta}}

    # When a tools/call carries a traceparent only in params._meta (none in its headers)
    async def scenario() -> None:
        async with ServedInProcess(app) as client:
            response = await client.post("/mcp", json=body, headers={**headers, "authorization": "Bearer k"})
            assert response.status_code == 200, response.text

    anyio.run(scenario)

    # Then the MCP span is in the client's trace, the HTTP span in its own, and each links to the other
    spans = recorded.get_finished_spans()
    [http] = [span for span in spans if span.name == "POST /mcp"]
    [mcp] = [span for span in spans if span.name == "tools/call list_endpoints"]
    assert f"{mcp.context.trace_id:032x}" == TRACE_ID and mcp.context.trace_id != http.context.trace_id
    assert [link.context.span_id for link in mcp.links] == [http.context.span_id]
    assert [link.context.span_id for link in http.links] == [mcp.context.span_id]
