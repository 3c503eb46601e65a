"""Each MCP POST answered the way its result is produced: as one `application/json` body when it is ready at
once, as an event stream when progress will flow before it.

The specification lets a server answer any POST with either (Streamable HTTP, "Sending Messages to the
Server"), and the SDK offers both as transports of one server (`streamable_http_app(json_response=...)`).
Both are built on the same server and this app picks one per request: a `tools/call` that carries a progress
token or names a tool which streams progress, and a 2025-11-25 `tasks/result` (task status notifications flow
while it waits), go to the event-stream transport (its first byte leaves before the work starts); every other
request (initialize, ping, tools/list, server/discover, listings, quiet
tool calls) is answered as JSON without a stream: a quiet 2025-era tools/call by the SDK's single-exchange kernel
in the request's own task (mcp/single_exchange.py), a tools/list the SDK has answered before, alike but for its
id, with that answer (mcp/listing_answers.py), the rest by the JSON transport; a 2025-era call that asks its user,
and the answer to its question, by mcp/open_stream.py. The protocol handling, both eras
included, stays the SDK's.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Collection
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

from starlette.applications import Starlette
from starlette.types import Receive, Scope, Send

from mcp_backend.doors import UNREAD
from mcp_backend.mcp.listing_answers import ListingAnswers
from mcp_backend.mcp.open_stream import OpenStreamExchange
from mcp_backend.mcp.request_body import ClientDisconnected, request_body
from mcp_backend.mcp.single_exchange import SingleExchange


def streams_its_answer(message: Any, streaming_tools: Collection[str]) -> bool:
    """A `tools/call` with a progress token, or of a tool that streams progress."""
    if not isinstance(message, dict) or message.get("method") != "tools/call":
        return False
    params = message.get("params")
    if not isinstance(params, dict):
        return False
    meta = params.get("_meta")
    if isinstance(meta, dict) and meta.get("progressToken") is not None:
        return True
    name = params.get("name")
    return isinstance(name, str) and name in streaming_tools


def waits_on_a_task(message: Any, scope: Scope) -> bool:
    """A 2025-11-25 `tasks/result`: it may wait for its task, and status notifications flow before the result."""
    if not isinstance(message, dict) or message.get("method") != "tasks/result":
        return False
    versions = [value for name, value in scope["headers"] if name.lower() == b"mcp-protocol-version"]
    return versions == [b"2025-11-25"]


def accepts_both(scope: Scope) -> bool:
    """Clients must accept both forms (Streamable HTTP, "Sending Messages to the Server"): a POST that does not
    is refused with 406 by the event-stream transport, whichever form its answer would take."""
    accept = b",".join(value for name, value in scope["headers"] if name.lower() == b"accept").lower()
    return b"text/event-stream" in accept or b"*/*" in accept


class ResponseModes:
    """ASGI app over the SDK's JSON and event-stream apps of one server; runs both transports' lifespans."""

    def __init__(
        self,
        json_app: Starlette,
        stream_app: Starlette,
        streaming_tools: Collection[str],
        single_exchange: SingleExchange | None = None,
        open_stream: OpenStreamExchange | None = None,
    ) -> None:
        self.json_app = json_app
        self.stream_app = stream_app
        self.streaming_tools = frozenset(streaming_tools)
        self.listings = ListingAnswers(json_app)
        self.single_exchange = single_exchange
        self.open_stream = open_stream

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.json_app(scope, receive, send)
            return
        try:
            body, message, replay = await request_body(scope, receive)  # read by the guard: not read again
        except ClientDisconnected:
            return  # nobody is left to answer
        if message is UNREAD:
            try:
                message = json.loads(body)
            except (ValueError, RecursionError):
                message = None  # the SDK answers it with its parse error
        if self.open_stream is not None:
            # A 2025-era call that asks its user on its stream, an answer to its question, a session id for
            # an initialize that declares elicitation (mcp/open_stream.py).
            if await self.open_stream.serves(scope, replay, send, body, message, streams=accepts_both(scope)):
                return
            send = await self.open_stream.with_session_id(message, send)
        streamed = streams_its_answer(message, self.streaming_tools) or waits_on_a_task(message, scope)
        if streamed or not accepts_both(scope):
            await self.stream_app(scope, replay, send)
            return
        exchange = self.single_exchange
        taken = exchange.request_for(scope, body, message) if exchange is not None else None
        if exchange is not None and taken is not None:
            await exchange.answer(scope, replay, send, *taken)
        else:
            await self.listings.answer(scope, replay, send, message)

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Both transports' session managers, as each app's own lifespan starts them."""
        async with AsyncExitStack() as stack:
            for app in (self.json_app, self.stream_app):
                await stack.enter_async_context(app.router.lifespan_context(app))
            if self.single_exchange is not None:
                await stack.enter_async_context(self.single_exchange.running())
            if self.open_stream is not None:
                await stack.enter_async_context(self.open_stream.running())
            yield

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        await receive()  # lifespan.startup
        async with self.running():
            await send({"type": "lifespan.startup.complete"})
            await receive()  # lifespan.shutdown
        await send({"type": "lifespan.shutdown.complete"})
