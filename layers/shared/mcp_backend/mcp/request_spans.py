"""The endpoint's HTTP server span (only in the app with tracing on: mcp_backend.tracing).

One span per request to the endpoint, its parent the client's `traceparent` header when well-formed (else a new
trace). The guard's steps and the AWS calls they make are its children; the SDK's MCP span (`tools/call <tool>`,
the MCP semantic conventions) is its child too, or, when the request's `params._meta` carries a `traceparent`,
a child of that one (the SDK reads it), and then the two spans are linked both ways (`link_to_request_span`), so
each trace leads to the other. The URL's query string is never recorded.
"""

from __future__ import annotations

from typing import Any

import anyio.to_thread
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mcp_backend.mcp.guard import HEALTH_PATH
from mcp_backend.tracing.propagation import extract
from mcp_backend.tracing.setup import flush as flush_spans
from mcp_backend.tracing.spans import link_with_current, span

# The scope key under which the request's HTTP span is kept for the SDK middleware inside it.
REQUEST_SPAN_KEY = "mcp_backend.request_span"


def link_to_request_span(scope: Scope) -> None:
    """Called inside the SDK's MCP span: link it with the request's HTTP span when they are in different traces."""
    request_span = scope.get(REQUEST_SPAN_KEY)
    if request_span is not None:
        link_with_current(request_span)


class TracedRequests:
    """ASGI middleware: a server span around each HTTP request but the Web Adapter's readiness checks; a sampled
    request's spans are exported once its response is out (before Lambda may freeze the environment)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] == HEALTH_PATH:
            await self.app(scope, receive, send)
            return
        carrier = {
            name.decode("latin-1").lower(): value.decode("latin-1")
            for name, value in scope["headers"]
            if name.lower() in (b"traceparent", b"tracestate")
        }
        attributes: dict[str, Any] = {
            "http.request.method": scope["method"],
            "url.path": scope["path"],
            "url.scheme": scope.get("scheme", "http"),
        }
        with span(
            f"{scope['method']} {scope['path']}", kind="server", parent=extract(carrier), attributes=attributes
        ) as request_span:
            scope[REQUEST_SPAN_KEY] = request_span

            async def send_with_status(message: Message) -> None:
                if message["type"] == "http.response.start":
                    request_span.set_attribute("http.response.status_code", message["status"])
                    if message["status"] >= 500:
                        request_span.record_error(str(message["status"]))
                await send(message)

            await self.app(scope, receive, send_with_status)
            sampled = request_span.recording
        if sampled:  # a request the sampler dropped has nothing to export
            await anyio.to_thread.run_sync(flush_spans)
