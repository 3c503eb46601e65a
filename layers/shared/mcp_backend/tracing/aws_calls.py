"""A client span around each call an AWS SDK client makes (botocore's events), with the service, the operation,
the request id and the status."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mcp_backend.tracing.attributes import safe_attributes
from mcp_backend.tracing.spans import SpanHandle
from mcp_backend.tracing.state import STATE

_BOTOCORE_SPAN_KEY = "mcp_backend.span"


def instrument_client(client: Any) -> Any:
    """A client span around each call `client` makes (botocore's before-call and after-call events), when a span
    is current: a call outside any traced work (a lease taken ahead in the background) starts no trace of its own.
    With tracing off (or not configured in this process: the telemetry extension) the client is returned untouched.
    Registering twice is harmless (the handlers' unique ids)."""
    if STATE.tracer is None:
        return client
    events = getattr(getattr(client, "meta", None), "events", None)
    if events is not None:
        events.register("before-call", _before_aws_call, unique_id="mcp-backend-tracing-before")
        events.register("after-call", _after_aws_call, unique_id="mcp-backend-tracing-after")
        events.register("after-call-error", _after_aws_call_error, unique_id="mcp-backend-tracing-error")
    return client


def _before_aws_call(model: Any, params: Any, context: dict[str, Any], **_: Any) -> None:
    tracer = STATE.tracer
    if tracer is None:
        return
    from opentelemetry.trace import SpanKind, get_current_span

    if not get_current_span().is_recording():
        return
    attributes: dict[str, Any] = {
        "rpc.system": "aws-api",
        "rpc.service": model.service_model.service_id,
        "rpc.method": model.name,
    }
    body = params.get("body") if isinstance(params, Mapping) else None
    table = body.get("TableName") if isinstance(body, Mapping) else None
    if isinstance(table, str):
        attributes["aws.dynamodb.table_names"] = table
    context[_BOTOCORE_SPAN_KEY] = tracer.start_span(
        f"{model.service_model.service_id}.{model.name}", kind=SpanKind.CLIENT, attributes=attributes
    )


def _after_aws_call(http_response: Any, parsed: Any, context: dict[str, Any], **_: Any) -> None:
    recorded = context.pop(_BOTOCORE_SPAN_KEY, None)
    if recorded is None:
        return
    metadata = parsed.get("ResponseMetadata", {}) if isinstance(parsed, Mapping) else {}
    status = metadata.get("HTTPStatusCode") or getattr(http_response, "status_code", None)
    recorded.set_attributes(
        safe_attributes({"aws.request_id": metadata.get("RequestId"), "http.response.status_code": status})
    )
    error = parsed.get("Error", {}) if isinstance(parsed, Mapping) else {}
    if isinstance(error, Mapping) and error.get("Code"):
        SpanHandle(recorded).record_error(str(error["Code"])[:64])
    recorded.end()


def _after_aws_call_error(exception: BaseException, context: dict[str, Any], **_: Any) -> None:
    recorded = context.pop(_BOTOCORE_SPAN_KEY, None)
    if recorded is not None:
        SpanHandle(recorded).record_error(type(exception).__name__)
        recorded.end()
