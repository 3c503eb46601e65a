"""A request's whole body, read before an app runs and replayed to it: the HTTP guard reads it to check it, the
response-mode switch to pick a transport, and the SDK's transport reads it again from the replay."""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

from starlette.types import Message, Receive, Scope

from mcp_backend.doors import UNREAD

# The body the HTTP guard read (and already replays to the next app), and its reading when the guard made one that
# every parser agrees on (else UNREAD): set by the guard while the apps behind it serve the request. A plain tuple:
# one is made per request.
GUARDED_BODY: ContextVar[tuple[bytes, Any] | None] = ContextVar("mcp_backend_guarded_body", default=None)


class ClientDisconnected(Exception):
    """The client closed the connection before its request body ended."""


class BodyTooLarge(Exception):
    """The request body is longer than the cap; nothing past the cap was read."""


async def buffered_body(receive: Receive, max_bytes: int | None = None) -> tuple[bytes, Receive]:
    """The whole request body, and a receive that replays it to the next app (then passes on what follows:
    the disconnect the SDK's event stream waits for). Raises ClientDisconnected when the client hangs up
    before the body ends, and BodyTooLarge as soon as more than `max_bytes` arrived (the rest is never read)."""
    chunks = []
    received = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnected
        if message["type"] != "http.request":
            continue
        chunk = message.get("body", b"")
        received += len(chunk)
        if max_bytes is not None and received > max_bytes:
            raise BodyTooLarge
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    body = b"".join(chunks)
    replayed = False

    async def replay() -> Message:
        nonlocal replayed
        if not replayed:
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return body, replay


async def request_body(scope: Scope, receive: Receive) -> tuple[bytes, Any, Receive]:
    """The body the guard already read with its reading (and `receive` unchanged: it replays it), else the body
    read now, unread."""
    guarded = GUARDED_BODY.get()
    if guarded is not None:
        return guarded[0], guarded[1], receive
    body, replay = await buffered_body(receive)
    return body, UNREAD, replay
