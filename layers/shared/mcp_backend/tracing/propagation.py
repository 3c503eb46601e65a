"""W3C trace context across process boundaries: the client's `traceparent` (HTTP header or the request's
`params._meta`), an SQS message attribute (or Lambda's `AWSTraceHeader`), and the probe payload. A malformed one
starts a new trace."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from mcp_backend.tracing.state import STATE

if TYPE_CHECKING:
    from opentelemetry.context import Context

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
SQS_TRACE_ATTRIBUTES = (TRACEPARENT, TRACESTATE)
_XRAY_ROOT = re.compile(r"Root=1-([0-9a-f]{8})-([0-9a-f]{24})", re.I)
_XRAY_PARENT = re.compile(r"Parent=([0-9a-f]{16})", re.I)
_XRAY_SAMPLED = re.compile(r"Sampled=([01])")


def extract(carrier: Mapping[str, Any] | None) -> Context | None:
    """The context a W3C carrier names (`traceparent`, `tracestate`), or None when it names none or a malformed one
    (a new trace starts: never an error)."""
    if STATE.tracer is None or not carrier:
        return None
    value = carrier.get(TRACEPARENT)
    if not isinstance(value, str):
        return None
    from opentelemetry.propagate import extract as extract_context
    from opentelemetry.trace import get_current_span

    state = carrier.get(TRACESTATE)
    text_carrier = {TRACEPARENT: value, **({TRACESTATE: state} if isinstance(state, str) else {})}
    try:
        context = extract_context(text_carrier)
    except (ValueError, TypeError):
        return None
    return context if get_current_span(context).get_span_context().is_valid else None


def current_carrier() -> dict[str, str]:
    """The current span's context as W3C headers (empty with tracing off or no span)."""
    if STATE.tracer is None:
        return {}
    from opentelemetry.propagate import inject

    carrier: dict[str, str] = {}
    inject(carrier)
    return {key: value for key, value in carrier.items() if key in SQS_TRACE_ATTRIBUTES}


def sqs_message_attributes() -> dict[str, dict[str, str]]:
    """The current context as SQS message attributes (two of the ten a message may have), or none."""
    return {key: {"DataType": "String", "StringValue": value} for key, value in current_carrier().items()}


def sqs_record_context(record: Mapping[str, Any]) -> Context | None:
    """The sender's context from an SQS record (Lambda's event shape): its `traceparent` message attribute, else
    Lambda's `AWSTraceHeader` system attribute converted to W3C."""
    if STATE.tracer is None:
        return None
    attributes = record.get("messageAttributes") or {}
    carrier = {
        key: attribute.get("stringValue")
        for key in SQS_TRACE_ATTRIBUTES
        if isinstance(attribute := attributes.get(key), Mapping)
    }
    context = extract(carrier)
    if context is None:
        header = (record.get("attributes") or {}).get("AWSTraceHeader")
        traceparent = xray_header_to_traceparent(header) if isinstance(header, str) else None
        context = extract({TRACEPARENT: traceparent}) if traceparent else None
    return context


def xray_header_to_traceparent(header: str) -> str | None:
    """`Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1` as a W3C traceparent (X-Ray's
    trace id is the W3C one with a dash after its first eight digits), or None without a root and parent."""
    root, parent = _XRAY_ROOT.search(header), _XRAY_PARENT.search(header)
    if root is None or parent is None:
        return None
    sampled = _XRAY_SAMPLED.search(header)
    flags = "01" if sampled is None or sampled.group(1) == "1" else "00"
    return f"00-{(root.group(1) + root.group(2)).lower()}-{parent.group(1).lower()}-{flags}"
