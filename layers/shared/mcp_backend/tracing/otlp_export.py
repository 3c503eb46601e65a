"""Spans exported as OTLP/HTTP with the JSON encoding, which X-Ray's OTLP endpoint and every collector accept."""

from __future__ import annotations

import json
import logging
import threading
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from mcp_backend.config import TracingSettings
from mcp_backend.lazy_imports import loaded_on_first_use
from mcp_backend.tracing.state import INSTRUMENTATION_NAME

if TYPE_CHECKING:
    import http.client

_log = logging.getLogger("mcp_backend.tracing")
# Loaded with the first export: every function imports this module, few export spans.
_http_client = loaded_on_first_use("http.client")
_ssl = loaded_on_first_use("ssl")


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

    def forked(self) -> None:
        """In a forked child: a new lock, and no connection (the one kept is the parent's; it stays open there)."""
        self._connection_lock = threading.Lock()
        self._connection = None

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
