"""OpenTelemetry spans for a tool call, from the client's request to the worker's last write (docs/operations.md,
"Traces").

Off by default (TRACING_MODE=off): nothing here imports OpenTelemetry, `span()` hands back one shared object that
does nothing, and no AWS client gets a hook. On (xray or otlp), spans go through the OpenTelemetry SDK to the OTLP
endpoint of the collector extension (the ADOT Lambda layer, which also brings the SDK and its exporter: neither
ships in this stack's layers). A process that already set an SDK tracer provider (the local stack, a test) keeps it.

Context crosses process boundaries as W3C trace context: the client's `traceparent` (HTTP header or the request's
`params._meta`), an SQS message attribute (or Lambda's `AWSTraceHeader`), and the probe payload. A malformed one
starts a new trace. Attribute values never carry credentials, payloads or URL query strings (`safe_attributes`).
"""

from __future__ import annotations

import json
import logging
import re
import threading
import urllib.parse
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any, Literal

from mcp_backend.config import TracingSettings, load_settings
from mcp_backend.lazy_imports import loaded_on_first_use

if TYPE_CHECKING:
    import http.client

    from opentelemetry.context import Context
    from opentelemetry.trace import Tracer

SpanKindName = Literal["internal", "server", "client", "producer", "consumer"]
TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
SQS_TRACE_ATTRIBUTES = (TRACEPARENT, TRACESTATE)
INSTRUMENTATION_NAME = "mcp-backend"
_BOTOCORE_SPAN_KEY = "mcp_backend.span"
# Attribute names that may hold a credential, whatever their value looks like.
_SECRET_NAME = re.compile(r"(token|secret|password|passwd|authorization|api[_.-]?key|credential|cookie)", re.I)
_URL_WITH_QUERY = re.compile(r"^([a-z][a-z0-9+.-]*://[^?#\s]*)[?#].*$", re.I | re.S)
_XRAY_ROOT = re.compile(r"Root=1-([0-9a-f]{8})-([0-9a-f]{24})", re.I)
_XRAY_PARENT = re.compile(r"Parent=([0-9a-f]{16})", re.I)
_XRAY_SAMPLED = re.compile(r"Sampled=([01])")
_log = logging.getLogger("mcp_backend.tracing")
# Loaded with the first export: every function imports this module, few export spans.
_http_client = loaded_on_first_use("http.client")
_ssl = loaded_on_first_use("ssl")


class _NoSpan:
    """What `span()` yields with tracing off: every call does nothing. One instance serves every caller."""

    def __enter__(self) -> _NoSpan:
        return self

    def __exit__(self, *_: object) -> None:
        return None

    def set_attribute(self, key: str, value: Any) -> None:
        return None

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        return None

    def record_error(self, error_type: str) -> None:
        return None

    @property
    def recording(self) -> bool:
        return False


NO_SPAN = _NoSpan()


class _Tracing:
    """The configured state: the tracer, or None while tracing is off."""

    def __init__(self) -> None:
        self.tracer: Tracer | None = None
        self.provider: Any = None
        self.exporter: OtlpJsonExporter | None = None
        self.configured = False
        self.lock = threading.Lock()


_STATE = _Tracing()


def configure(settings: TracingSettings | None = None) -> bool:
    """Once per process (later calls return what the first decided): tracing on when TRACING_MODE says so and the
    OpenTelemetry SDK can be imported. Returns whether spans are recorded."""
    with _STATE.lock:
        if not _STATE.configured:
            _STATE.configured = True
            settings = settings or load_settings(TracingSettings)
            if settings.tracing_mode != "off":
                _STATE.tracer, _STATE.provider = _start(settings)
        return _STATE.tracer is not None


def _start(settings: TracingSettings) -> tuple[Any, Any]:
    # Imported only with tracing on: the SDK comes with the MCP layer (McpServer, ProbeWorker) or the SDK layer the
    # TracingSdkLayerArn parameter names (the ADOT Python layer) on AWS, and with the dev group locally.
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
    except ImportError:
        _log.warning("TRACING_MODE is %s but the OpenTelemetry SDK is not installed: no spans", settings.tracing_mode)
        return None, None
    current = trace.get_tracer_provider()
    if isinstance(current, TracerProvider):  # set by the host process (the local stack, a test): kept
        return current.get_tracer(INSTRUMENTATION_NAME), current
    resource = Resource.create(
        {
            "service.name": settings.aws_lambda_function_name or INSTRUMENTATION_NAME,
            "cloud.provider": "aws",
            "cloud.region": settings.aws_region,
            "faas.name": settings.aws_lambda_function_name,
            "deployment.environment.name": settings.environment,
        }
    )
    provider = TracerProvider(resource=resource, sampler=ParentBased(TraceIdRatioBased(settings.tracing_sample_rate)))
    _STATE.exporter = OtlpJsonExporter.for_settings(settings)
    # Duck-typed (not a SpanExporter subclass), so that defining it imports no SDK.
    provider.add_span_processor(BatchSpanProcessor(_STATE.exporter))  # type: ignore[arg-type]
    trace.set_tracer_provider(provider)
    return provider.get_tracer(INSTRUMENTATION_NAME), provider


class OtlpJsonExporter:
    """A span exporter for the SDK's batch processor: OTLP/HTTP with the JSON encoding, which X-Ray's OTLP
    endpoint and every collector accept, so no protobuf runtime ships. `xray` mode signs each request with SigV4
    (service `xray`) using the function's credentials; `otlp` mode posts as it is (a collector extension on
    localhost, or a gateway). A failed export costs the batch and one warning line (its HTTP status), never the
    invocation.

    It posts with the standard library's `http.client` over one kept-alive connection: a post costs about a fifth
    of httpx's CPU, and a sampled request pays it after its response (docs/benchmarks.md, "Tracing on and off
    (McpServer)"). No proxy is read from the environment: the endpoint is on localhost, or X-Ray's, reached
    directly or through a VPC interface endpoint."""

    def __init__(self, endpoint: str, region: str = "", sign: bool = False, timeout_seconds: float = 2.0) -> None:
        self.endpoint = endpoint
        self.region = region
        self.sign = sign
        self.timeout_seconds = timeout_seconds
        self._credentials: Any = None
        url = urllib.parse.urlsplit(endpoint)
        self._https = url.scheme == "https"
        self._host = url.hostname or "localhost"
        self._port = url.port
        self._path = (url.path or "/") + (f"?{url.query}" if url.query else "")
        self._connection: http.client.HTTPConnection | None = None
        self._connection_lock = threading.Lock()

    @classmethod
    def for_settings(cls, settings: TracingSettings) -> OtlpJsonExporter:
        if settings.tracing_mode == "xray":
            # https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/CloudWatch-OTLPEndpoint.html
            return cls(f"https://xray.{settings.aws_region}.amazonaws.com/v1/traces", settings.aws_region, sign=True)
        return cls(settings.otel_exporter_otlp_traces_endpoint)

    def export(self, spans: Sequence[Any]) -> Any:
        from opentelemetry.sdk.trace.export import SpanExportResult

        body = json.dumps(otlp_json(spans), separators=(",", ":")).encode()
        headers = {"Content-Type": "application/json"}
        try:
            if self.sign:
                headers = self._signed_headers(body, headers)
            status = self._post(body, headers)
        except Exception as error:  # noqa: BLE001 - spans are best effort: never an invocation's failure
            _log.warning("spans not exported: %s", type(error).__name__)
            return SpanExportResult.FAILURE
        if status >= 300:
            _log.warning("spans not exported: HTTP %s", status)
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def _post(self, body: bytes, headers: dict[str, str]) -> int:
        """POST `body` over the kept-alive connection (opened on first use), its status. A kept-alive connection
        the receiver closed while idle fails before any answer: the post is sent once more on a new one."""
        with self._connection_lock:
            for reused in (self._connection is not None, False):
                connection = self._connection or self._connect()
                try:
                    connection.request("POST", self._path, body=body, headers=headers)
                    response = connection.getresponse()
                    response.read()
                except (_http_client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                    self._close()
                    if reused:
                        continue
                    raise
                except Exception:
                    self._close()
                    raise
                if response.will_close:
                    self._close()
                return response.status
            raise AssertionError("unreachable: the second attempt returns or raises")

    def _connect(self) -> http.client.HTTPConnection:
        if self._https:
            self._connection = _http_client.HTTPSConnection(
                self._host, self._port, timeout=self.timeout_seconds, context=_ssl.create_default_context()
            )
        else:
            self._connection = _http_client.HTTPConnection(self._host, self._port, timeout=self.timeout_seconds)
        return self._connection

    def _close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def _signed_headers(self, body: bytes, headers: dict[str, str]) -> dict[str, str]:
        # botocore comes with the Lambda runtime (never in a layer); loaded with the first export.
        import botocore.session
        from botocore.auth import SigV4Auth
        from botocore.awsrequest import AWSRequest

        if self._credentials is None:
            self._credentials = botocore.session.get_session().get_credentials()
        request = AWSRequest(method="POST", url=self.endpoint, data=body, headers=headers)
        SigV4Auth(self._credentials, "xray", self.region).add_auth(request)
        return dict(request.headers.items())

    def reset(self) -> None:
        """Drop the connection and the credentials: the next export opens and resolves new ones."""
        with self._connection_lock:
            self._close()
            self._credentials = None

    def shutdown(self) -> None:
        with self._connection_lock:
            self._close()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def otlp_json(spans: Sequence[Any]) -> dict[str, Any]:
    """Spans (the SDK's ReadableSpan) as an OTLP ExportTraceServiceRequest in the JSON encoding: ids in hex,
    64-bit integers as strings, one resourceSpans entry per resource."""
    by_resource: dict[int, tuple[Any, list[dict[str, Any]]]] = {}
    for span in spans:
        entry = by_resource.setdefault(id(span.resource), (span.resource, []))
        entry[1].append(_otlp_span(span))
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": _otlp_attributes(resource.attributes if resource else {})},
                "scopeSpans": [{"scope": {"name": INSTRUMENTATION_NAME}, "spans": encoded}],
            }
            for resource, encoded in by_resource.values()
        ]
    }


def _otlp_span(span: Any) -> dict[str, Any]:
    context = span.get_span_context()
    encoded: dict[str, Any] = {
        "traceId": f"{context.trace_id:032x}",
        "spanId": f"{context.span_id:016x}",
        "name": span.name,
        "kind": span.kind.value + 1,  # OTLP counts SPAN_KIND_UNSPECIFIED as 0
        "startTimeUnixNano": str(span.start_time or 0),
        "endTimeUnixNano": str(span.end_time or 0),
        "attributes": _otlp_attributes(span.attributes or {}),
        "status": {"code": span.status.status_code.value},
    }
    if span.parent is not None:
        encoded["parentSpanId"] = f"{span.parent.span_id:016x}"
    if span.links:
        encoded["links"] = [
            {"traceId": f"{link.context.trace_id:032x}", "spanId": f"{link.context.span_id:016x}"}
            for link in span.links
        ]
    return encoded


def _otlp_attributes(attributes: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [{"key": key, "value": _otlp_value(value)} for key, value in attributes.items()]


def _otlp_value(value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, str):
        return {"stringValue": value}
    return {"arrayValue": {"values": [_otlp_value(item) for item in value]}}


def enabled() -> bool:
    return _STATE.tracer is not None


def annotate(attributes: Mapping[str, Any]) -> None:
    """Attributes on the current span (the request's principal tier, a job's id), when one is recording."""
    if _STATE.tracer is None:
        return
    from opentelemetry.trace import get_current_span

    current = get_current_span()
    if current.is_recording():
        current.set_attributes(safe_attributes(attributes))


def link_with_current(other: Any) -> None:
    """Link the current span and `other` (a span handle) both ways when they are in different traces: the SDK's
    MCP span follows a `traceparent` in `params._meta`, while the HTTP request's span, opened before the body is
    read, follows the header's (or starts a trace). Each trace then names the other."""
    if _STATE.tracer is None or not isinstance(other, _SpanHandle):
        return
    from opentelemetry.trace import get_current_span

    current = get_current_span()
    theirs, ours = current.get_span_context(), other.context
    if current.is_recording() and theirs.is_valid and theirs.trace_id != ours.trace_id:
        current.add_link(ours)
        other.link(theirs)


def reset() -> None:
    """Forget the configuration (tests configure again with their own settings)."""
    with _STATE.lock:
        _STATE.tracer, _STATE.provider, _STATE.exporter, _STATE.configured = None, None, None, False


def forget_connections() -> None:
    """After a SnapStart restore (mcp_backend.snapstart): the exporter's connection and credentials are the
    snapshot's; the next export opens its own and resolves the restored environment's credentials."""
    if _STATE.exporter is not None:
        _STATE.exporter.reset()


def flush(timeout_millis: int = 2000) -> None:
    """Export the spans ended so far: at an invocation's end, before Lambda may freeze the environment."""
    provider = _STATE.provider
    if provider is not None and hasattr(provider, "force_flush"):
        provider.force_flush(timeout_millis)


def span(
    name: str,
    *,
    kind: SpanKindName = "internal",
    attributes: Mapping[str, Any] | None = None,
    parent: Context | None = None,
    links: Sequence[Context] = (),
) -> AbstractContextManager[Any]:
    """A span around a block, current inside it (its child spans and the context a message carries are its).
    `parent`: a context extracted from a carrier, else the current span is the parent. With tracing off, NO_SPAN."""
    tracer = _STATE.tracer
    if tracer is None:
        return NO_SPAN
    if parent is None and not links and _inside_an_unsampled_trace():
        # The sampler follows the parent (ParentBased): no span under an unsampled one is ever recorded. Starting
        # none costs nothing, and the parent stays current, so the trace and its not-sampled flag still travel on.
        return NO_SPAN
    return _recorded_span(tracer, name, kind, attributes, parent, links)


def _inside_an_unsampled_trace() -> bool:
    from opentelemetry.trace import get_current_span

    current = get_current_span().get_span_context()
    return current.is_valid and not current.trace_flags.sampled


@contextmanager
def _recorded_span(
    tracer: Tracer,
    name: str,
    kind: SpanKindName,
    attributes: Mapping[str, Any] | None,
    parent: Context | None,
    links: Sequence[Context],
) -> Iterator[Any]:
    from opentelemetry.trace import Link, SpanKind, get_current_span

    span_links = [Link(get_current_span(link).get_span_context()) for link in links]
    with tracer.start_as_current_span(
        name,
        context=parent,
        kind=SpanKind[kind.upper()],
        attributes=safe_attributes(attributes or {}),
        links=span_links,
        record_exception=False,  # an exception's text may quote a payload: its type is recorded instead
    ) as recorded:
        try:
            yield _SpanHandle(recorded)
        except BaseException as error:
            _SpanHandle(recorded).record_error(type(error).__name__)
            raise


class _SpanHandle:
    """A recording span seen through `safe_attributes`."""

    def __init__(self, span: Any) -> None:
        self._span = span

    def set_attribute(self, key: str, value: Any) -> None:
        if self._span.is_recording():  # an unsampled span keeps nothing: nothing to clean
            self._span.set_attributes(safe_attributes({key: value}))

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        if self._span.is_recording():
            self._span.set_attributes(safe_attributes(attributes))

    @property
    def recording(self) -> bool:
        """False for a span the sampler dropped: nothing of it is exported."""
        return bool(self._span.is_recording())

    @property
    def context(self) -> Any:
        return self._span.get_span_context()

    def link(self, context: Any) -> None:
        if self._span.is_recording():
            self._span.add_link(context)

    def record_error(self, error_type: str) -> None:
        from opentelemetry.trace import StatusCode

        self._span.set_attribute("error.type", error_type)
        self._span.set_status(StatusCode.ERROR)


def safe_attributes(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """The attributes a span may carry: none whose name suggests a credential, URLs without their query string or
    fragment, and only scalar values (a payload is never an attribute)."""
    kept: dict[str, Any] = {}
    for key, value in attributes.items():
        if value is None or _SECRET_NAME.search(key):
            continue
        if isinstance(value, str):
            kept[key] = _URL_WITH_QUERY.sub(r"\1", value)[:256]
        elif isinstance(value, bool | int | float):
            kept[key] = value
    return kept


# -- carriers ----------------------------------------------------------------------------------------------------


def extract(carrier: Mapping[str, Any] | None) -> Context | None:
    """The context a W3C carrier names (`traceparent`, `tracestate`), or None when it names none or a malformed one
    (a new trace starts: never an error)."""
    if _STATE.tracer is None or not carrier:
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
    if _STATE.tracer is None:
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
    if _STATE.tracer is None:
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


# -- AWS calls ---------------------------------------------------------------------------------------------------


def instrument_client(client: Any) -> Any:
    """A client span around each call `client` makes (botocore's before-call and after-call events), when a span
    is current: a call outside any traced work (a lease taken ahead in the background) starts no trace of its own.
    With tracing off (or not configured in this process: the telemetry extension) the client is returned untouched.
    Registering twice is harmless (the handlers' unique ids)."""
    if _STATE.tracer is None:
        return client
    events = getattr(getattr(client, "meta", None), "events", None)
    if events is not None:
        events.register("before-call", _before_aws_call, unique_id="mcp-backend-tracing-before")
        events.register("after-call", _after_aws_call, unique_id="mcp-backend-tracing-after")
        events.register("after-call-error", _after_aws_call_error, unique_id="mcp-backend-tracing-error")
    return client


def _before_aws_call(model: Any, params: Any, context: dict[str, Any], **_: Any) -> None:
    tracer = _STATE.tracer
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
        _SpanHandle(recorded).record_error(str(error["Code"])[:64])
    recorded.end()


def _after_aws_call_error(exception: BaseException, context: dict[str, Any], **_: Any) -> None:
    recorded = context.pop(_BOTOCORE_SPAN_KEY, None)
    if recorded is not None:
        _SpanHandle(recorded).record_error(type(exception).__name__)
        recorded.end()
