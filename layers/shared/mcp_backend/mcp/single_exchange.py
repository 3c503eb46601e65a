"""A quiet `tools/call` of the 2025 protocol era answered in the request's own task, by the SDK's single-exchange
kernel, instead of through a stateless transport built for it.

For each stateless POST of the 2025 era, the SDK's Streamable HTTP transport builds a transport, a JSON-RPC
dispatcher over memory streams, a task group and a server task, then tears them down: about 0.35 ms of CPU per
request here, more than the rest of a call's protocol handling. That machinery serves streams, server-to-client
requests and cancellation, none of which a stateless JSON answer can carry (`can_send_request=False`, and
notifications have no wire in JSON-response mode). The SDK serves its 2026-07-28 requests the direct way: a
`Connection` born ready from the request's envelope and one `serve_one` call (`mcp.server.runner`). This module does
the same for a 2025-era `tools/call`, with the connection the stateless transport would build (the header's protocol
version, no client info or capabilities; the SDK modules it needs come through mcp_backend.mcp.sdk_internals): the
SDK's server runs the request (validation, the initialization gate, the middleware, the handler, the result's
shape), and the answer is written as the JSON transport writes it.

Only a request the SDK's transport would pass to its server is taken: a POST whose body parses as the SDK parses it
into one JSON-RPC `tools/call` request, within the SDK's body limit, with an Accept the JSON transport serves, a
JSON Content-Type and no protocol-version header or one of the 2025 era's. Anything else, and every other method,
goes to the SDK's transport, which answers it as before. `tests/unit/test_single_exchange.py` sends the same
requests both ways and compares the answers.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import pydantic_core
from mcp.server.lowlevel import Server
from mcp_types import (
    DEFAULT_NEGOTIATED_VERSION,
    INTERNAL_ERROR,
    ErrorData,
    JSONRPCError,
    JSONRPCRequest,
    JSONRPCResponse,
    RequestId,
    jsonrpc_message_adapter,
)
from pydantic import ValidationError
from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from mcp_backend.mcp.sdk_internals import (
    CONTENT_TYPE_JSON,
    DEFAULT_MAX_REQUEST_BODY_SIZE,
    HANDSHAKE_PROTOCOL_VERSIONS,
    CallOptions,
    Connection,
    MessageMetadata,
    NoBackChannelError,
    ServerMessageMetadata,
    TransportContext,
    check_accept_headers,
    handler_exception_to_error_data,
    serve_one,
)
from mcp_backend.observability import logger

TAKEN_METHODS = frozenset({"tools/call"})
_JSON_HEADERS = [(b"content-type", CONTENT_TYPE_JSON.encode())]
# What the stateless transport's dispatcher gives each request: no server-to-client requests on this channel.
_TRANSPORT = TransportContext(kind="streamable-http", can_send_request=False)


@dataclass
class _OneRequest:
    """The dispatch context of one stateless JSON answer: nothing but the answer reaches the client (a
    notification has no wire in JSON-response mode, and a server-to-client request has nowhere to land)."""

    request_id: RequestId
    message_metadata: MessageMetadata
    transport: TransportContext = _TRANSPORT
    cancel_requested: anyio.Event = field(default_factory=anyio.Event)
    can_send_request: bool = False

    async def send_raw_request(
        self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None
    ) -> dict[str, Any]:
        raise NoBackChannelError(method)

    async def notify(self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None) -> None:
        return None

    async def progress(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        return None


def _header(scope: Scope, name: bytes) -> list[bytes]:
    return [value for key, value in scope["headers"] if key.lower() == name]


def handshake_version(scope: Scope) -> str | None:
    """The 2025-era version this request names (the spec's default when it names none), or None when the SDK's
    transport would not serve it as a 2025-era request."""
    versions = _header(scope, b"mcp-protocol-version")
    if not versions:
        return DEFAULT_NEGOTIATED_VERSION
    if len(versions) > 1:
        return None
    version = versions[0].decode("latin-1")
    return version if version in HANDSHAKE_PROTOCOL_VERSIONS else None


def one_message(body: bytes) -> Any:
    """The body as one JSON-RPC message, parsed and validated as the SDK's transport does (so a body it refuses is
    still refused by it); None when it is not one."""
    try:
        return jsonrpc_message_adapter.validate_python(pydantic_core.from_json(body), by_name=False)
    except (ValueError, ValidationError):
        return None


def one_request(body: bytes) -> JSONRPCRequest | None:
    message = one_message(body)
    return message if isinstance(message, JSONRPCRequest) else None


async def served(
    server: Server[Any], dctx: Any, request: JSONRPCRequest, connection: Connection, lifespan_state: Any
) -> JSONRPCResponse | JSONRPCError:
    """One request run by the SDK's `serve_one`, its result or failure as the JSON-RPC reply to write."""
    try:
        result = await serve_one(
            server, dctx, request.method, request.params, connection=connection, lifespan_state=lifespan_state
        )
        return JSONRPCResponse(jsonrpc="2.0", id=request.id, result=result)
    except Exception as error:  # noqa: BLE001 - mapped as the SDK's dispatcher maps it, never with its text
        data = handler_exception_to_error_data(error)
        if data is None:
            # The SDK middleware answers every other failure itself (mcp/internal_errors.py); one that escapes
            # it still gets no exception text on the wire.
            logger.exception("tools/call failed outside the tool's middleware")
            data = ErrorData(code=INTERNAL_ERROR, message="Internal error")
        return JSONRPCError(jsonrpc="2.0", id=request.id, error=data)


class DirectlyServed:
    """Requests run by the SDK's `serve_one` in the request's own task, within the server's lifespan."""

    def __init__(self, server: Server[Any]) -> None:
        self.server = server
        self._lifespan_state: Any = None

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The server's lifespan, entered once as each session manager enters it."""
        async with self.server.lifespan(self.server) as state:
            self._lifespan_state = state
            try:
                yield
            finally:
                self._lifespan_state = None


class SingleExchange(DirectlyServed):
    """Answers the requests `request_for` accepts through the SDK's `serve_one`; ResponseModes asks it first."""

    def __init__(self, server: Server[Any], max_body_bytes: int = DEFAULT_MAX_REQUEST_BODY_SIZE) -> None:
        super().__init__(server)
        self.max_body_bytes = max_body_bytes

    def request_for(self, scope: Scope, body: bytes, message: Any) -> tuple[JSONRPCRequest, str] | None:
        """The request and its protocol version when this answers it, else None (the SDK's transport does)."""
        method = message.get("method") if isinstance(message, dict) else None
        if not isinstance(method, str) or method not in TAKEN_METHODS:  # untrusted JSON: a list is unhashable
            return None
        if scope["method"] != "POST" or len(body) > self.max_body_bytes:
            return None
        version = handshake_version(scope)
        if version is None:
            return None
        request = Request(scope)
        has_json, _ = check_accept_headers(request)
        content_type = request.headers.get("content-type", "")
        if not has_json or CONTENT_TYPE_JSON not in (part.strip() for part in content_type.split(";")[0].split(",")):
            return None
        parsed = one_request(body)
        return (parsed, version) if parsed is not None else None

    async def answer(self, scope: Scope, receive: Receive, send: Send, request: JSONRPCRequest, version: str) -> None:
        metadata = ServerMessageMetadata(request_context=Request(scope, receive), can_send_request=False)
        # Born ready, as the stateless transport's connection is: the header's version, nothing of the client.
        connection = Connection.from_envelope(version, None, None)
        dctx = _OneRequest(request.id, metadata)
        reply = await served(self.server, dctx, request, connection, self._lifespan_state)
        body = reply.model_dump_json(by_alias=True, exclude_unset=True).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-length", str(len(body)).encode()), *_JSON_HEADERS],
            }
        )
        await send({"type": "http.response.body", "body": body})
