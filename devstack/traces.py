"""Spans of the local stack (`make dev`, Tracing not off) as JSON lines, and `make trace ID=...`.

The in-process runtime runs every function in this process, so one OpenTelemetry tracer provider, set here, serves
them all: each span ended is written at once (no batching to wait for) as one JSON line to the running stack's
trace file, `.devstack/traces.jsonl` for `make dev`, with the resource of the function it ran in (`service.name`
its logical id, `faas.name`, `cloud.resource_id`). `make trace` reads that file back and prints one trace as a
tree, each line the span's duration, start and function. The Lambda runtime's sandboxes have no OpenTelemetry SDK
(on AWS the ADOT layer brings it), so there the functions record no spans (docs/local-stack.md).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider

from devstack import shared_layer
from devstack.runtime.running_function import resource_attributes, running_function

DEFAULT_TRACE_FILE = Path(".devstack") / "traces.jsonl"


class JsonLines(SpanProcessor):
    """Writes each span, as it ends, to the file `path` names while a stack is running (nothing otherwise), with
    the resource of the function it ran in. Every in-process function shares this process's one tracer provider,
    and so its one resource: a span takes its function's when it starts (devstack.runtime.running_function), else
    its local parent's (a span started where no function is marked, in a thread that did not copy the context)."""

    def __init__(self) -> None:
        self.path: Path | None = None
        self._lock = threading.Lock()
        self._resources: dict[int, dict[str, Any]] = {}

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        context = span.get_span_context()
        if self.path is None or context is None:
            return
        spec = running_function()
        if spec is not None:
            function = resource_attributes(spec)
        else:
            parent = span.parent
            local = parent is not None and not parent.is_remote
            function = self._resources.get(parent.span_id, {}) if local and parent is not None else {}
        with self._lock:
            self._resources[context.span_id] = {**dict(span.resource.attributes), **function}

    def on_end(self, span: ReadableSpan) -> None:
        context = span.get_span_context()
        with self._lock:
            resource = self._resources.pop(context.span_id, None) if context is not None else None
            if self.path is None:
                return
            record = span_record(span, resource if resource is not None else dict(span.resource.attributes))
            with self.path.open("a", encoding="utf-8") as out:
                out.write(json.dumps(record, sort_keys=True) + "\n")

    def shutdown(self) -> None:
        self.path = None

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


_LINES = JsonLines()
_INSTALLED = threading.Lock()
_attached = False


def span_record(span: ReadableSpan, resource: dict[str, Any]) -> dict[str, Any]:
    context = span.get_span_context()
    assert context is not None
    start, end = span.start_time or 0, span.end_time or 0
    return {
        "traceId": f"{context.trace_id:032x}",
        "spanId": f"{context.span_id:016x}",
        "parentSpanId": f"{span.parent.span_id:016x}" if span.parent is not None else None,
        "name": span.name,
        "kind": span.kind.name.lower(),
        "startTimeUnixNano": start,
        "endTimeUnixNano": end,
        "durationMs": round((end - start) / 1e6, 3),
        "status": span.status.status_code.name.lower(),
        "resource": {key: value for key, value in resource.items() if isinstance(value, str | bool | int | float)},
        "attributes": dict(span.attributes or {}),
        "links": [
            {"traceId": f"{link.context.trace_id:032x}", "spanId": f"{link.context.span_id:016x}"}
            for link in span.links
        ],
    }


def start_recording(path: Path, mode: str) -> None:
    """Spans of this process go to `path` from now on, and the functions' tracing (mcp_backend.tracing.setup) is on with
    `mode`: the provider is set once per process (OpenTelemetry allows one), the file per stack."""
    shared_layer.put_on_path()  # the functions' tracing lives in the layer, not on make dev's own path
    from mcp_backend.config import TracingSettings
    from mcp_backend.tracing import setup as tracing

    global _attached
    with _INSTALLED:
        provider = trace.get_tracer_provider()
        if not isinstance(provider, TracerProvider):
            provider = TracerProvider()  # every trace sampled: a developer's stack records what it runs
            trace.set_tracer_provider(provider)
        if not _attached:  # a provider someone else set (a test's) gets this exporter too
            provider.add_span_processor(_LINES)
            _attached = True
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")  # each stack starts the file afresh: it never grows across runs
        _LINES.path = path
    tracing.reset()
    tracing.configure(TracingSettings(tracing_mode=mode))  # type: ignore[arg-type]


def stop_recording() -> None:
    from mcp_backend.tracing import setup as tracing

    _LINES.path = None
    tracing.reset()
    tracing.configure(tracing_off())


def tracing_off() -> Any:
    from mcp_backend.config import TracingSettings

    return TracingSettings(tracing_mode="off")


# -- make trace --------------------------------------------------------------------------------------------------


def read_trace(path: Path, trace_id: str) -> list[dict[str, Any]]:
    """The spans of one trace in the file (its id as a W3C or an X-Ray trace id)."""
    wanted = trace_id.lower().removeprefix("1-").replace("-", "")
    if not path.exists():
        return []
    spans = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            record = json.loads(line)
            if record["traceId"] == wanted:
                spans.append(record)
    return spans


def find_traces(path: Path, attribute: str, value: str) -> list[str]:
    """The ids of the traces holding a span whose `attribute` is `value` (a job's id: `job.id`)."""
    if not path.exists():
        return []
    found: list[str] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        record = json.loads(line) if line.strip() else {}
        if record.get("attributes", {}).get(attribute) == value and record["traceId"] not in found:
            found.append(record["traceId"])
    return found


def tree_header(spans: Iterable[dict[str, Any]]) -> str:
    """The column titles above `tree_lines`."""
    width = function_width(spans)
    return f"{'duration':>10}    {'start':>10}     {'function':<{width}} | span"


def tree_lines(spans: Iterable[dict[str, Any]]) -> list[str]:
    """The trace as an indented tree, children in start order, each line the span's duration, its start after the
    trace's first span, the function it ran in (its resource's `service.name`), its name and the attributes an
    operator reads first."""
    spans = sorted(spans, key=lambda span: span["startTimeUnixNano"])
    ids = {span["spanId"] for span in spans}
    children: dict[str | None, list[dict[str, Any]]] = {}
    for span in spans:
        parent = span["parentSpanId"] if span["parentSpanId"] in ids else None
        children.setdefault(parent, []).append(span)
    origin = spans[0]["startTimeUnixNano"] if spans else 0
    width = function_width(spans)
    lines: list[str] = []

    def visit(span: dict[str, Any], depth: int) -> None:
        offset = (span["startTimeUnixNano"] - origin) / 1e6
        notes = [f"{key}={span['attributes'][key]}" for key in SHOWN_ATTRIBUTES if key in span["attributes"]]
        error = " ERROR" if span["status"] == "error" else ""
        lines.append(
            f"{span['durationMs']:>10.1f} ms {offset:>+10.1f} ms  {function_of(span):<{width}} | "
            f"{'  ' * depth}{span['name']}{error}" + (f"  [{', '.join(notes)}]" if notes else "")
        )
        for child in children.get(span["spanId"], []):
            visit(child, depth + 1)

    for root in children.get(None, []):
        visit(root, 0)
    return lines


def function_width(spans: Iterable[dict[str, Any]]) -> int:
    return max([len("function"), *(len(function_of(span)) for span in spans)])


def function_of(span: dict[str, Any]) -> str:
    """The function a recorded span ran in: its resource's service name (a file written before spans kept their
    resource: "-")."""
    return str(span.get("resource", {}).get("service.name") or "-")


SHOWN_ATTRIBUTES = (
    "mcp.method.name",
    "gen_ai.tool.name",
    "job.id",
    "job.queue_wait_ms",
    "app.principal.tier",
    "http.response.status_code",
    "error.type",
)
