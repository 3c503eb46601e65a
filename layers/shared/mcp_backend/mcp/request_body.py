"""A request's whole body, read before an app runs and replayed to it: the HTTP guard reads it to check it, the
response-mode switch to pick a transport, and the SDK's transport reads it again from the replay."""

from __future__ import annotations

from starlette.types import Message, Receive


class ClientDisconnected(Exception):
    """The client closed the connection before its request body ended."""


async def buffered_body(receive: Receive) -> tuple[bytes, Receive]:
    """The whole request body, and a receive that replays it to the next app (then passes on what follows:
    the disconnect the SDK's event stream waits for). Raises ClientDisconnected when the client hangs up
    before the body ends."""
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnected
        if message["type"] != "http.request":
            continue
        chunks.append(message.get("body", b""))
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
