"""tools/list answered from the SDK's own earlier answer to the same request.

The tool set is fixed when the app is built and a listing does not depend on who asks (each tool's access is
checked when it is called), so the SDK's answer to a `tools/list` is a function of the request alone: its
JSON-RPC message without the id, and the headers the SDK's transport reads. The first such request goes through
the SDK (which validates it, in its protocol era); its answer (200, JSON, a result with the same id) is kept,
and a later request that differs only in its id (a JSON-RPC id: a string or an integer) gets that answer with
its own id, without entering the SDK's transport. The answer is kept encoded: a later request costs the encoding
of its id alone, spliced in front of the kept bytes (encoding the whole listing again was a sixth of the CPU of a
`tools/list`). Everything outside the SDK (the guard: host, origin, authentication, the rate limit, the body;
telemetry: the correlation id, the request log line) runs for every request as before. An error, a stream or
anything unexpected is never kept, so malformed requests still get the SDK's answer. At most `max_entries`
distinct requests are kept, the least recently used dropped first, and only requests of at most
`MAX_KEPT_REQUEST_CHARS`.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

CACHED_METHODS = frozenset({"tools/list"})
# Request headers the SDK's Streamable HTTP transports read (and every MCP header, `Mcp-Param-*` included):
# two requests alike in these and in their message get the same answer.
_READ_HEADERS = frozenset({b"accept", b"content-type", b"host", b"origin", b"last-event-id"})
# A client's listing is a few hundred bytes; a larger one is answered by the SDK each time, so what is kept stays
# small (at most max_entries of these) whatever a tenant sends.
MAX_KEPT_REQUEST_CHARS = 8192


def _answer_key(scope: Scope, message: Any) -> tuple[Any, ...] | None:
    """What the SDK's answer to `message` depends on, or None when it is not a listing kept here."""
    method = message.get("method") if isinstance(message, dict) else None
    if not isinstance(method, str) or method not in CACHED_METHODS:
        return None
    request_id = message.get("id")
    if isinstance(request_id, bool) or not isinstance(request_id, int | str):
        return None  # a notification, or an id the SDK must judge
    if isinstance(request_id, str) and not _is_unicode_text(request_id):
        return None  # a lone surrogate escape: Python's parser takes it, the SDK's refuses the body (-32700)
    try:
        request = json.dumps({k: v for k, v in message.items() if k != "id"}, sort_keys=True)
    except (TypeError, ValueError):
        return None
    headers = tuple(
        sorted(
            (name.lower(), value)
            for name, value in scope["headers"]
            if name.lower() in _READ_HEADERS or name.lower().startswith(b"mcp-")
        )
    )
    if len(request) + sum(len(name) + len(value) for name, value in headers) > MAX_KEPT_REQUEST_CHARS:
        return None
    return scope["path"], headers, request


def _is_unicode_text(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


class ListingAnswers:
    """ASGI app in front of the SDK's JSON transport; `answer` is called with the parsed message."""

    def __init__(self, app: ASGIApp, max_entries: int = 64) -> None:
        self.app = app
        self.max_entries = max_entries
        # Each kept answer: its headers, and its JSON without the id, from the first member's opening quote on.
        self._answers: OrderedDict[tuple[Any, ...], tuple[list[tuple[bytes, bytes]], bytes]] = OrderedDict()

    async def answer(self, scope: Scope, receive: Receive, send: Send, message: Any) -> None:
        key = _answer_key(scope, message)
        if key is None:
            await self.app(scope, receive, send)
            return
        kept = self._answers.get(key)
        if kept is not None:
            self._answers.move_to_end(key)
            headers, rest = kept
            await _send_json(send, headers, _with_id(message["id"], rest))
            return
        await self.app(scope, receive, self._keeping(send, key, message["id"]))

    def _keeping(self, send: Send, key: tuple[Any, ...], request_id: int | str) -> Send:
        """`send`, noting the SDK's answer and keeping it when it is a result for this request."""
        start: dict[str, Any] = {}
        chunks: list[bytes] = []

        async def noting(message: Message) -> None:
            if message["type"] == "http.response.start":
                start.update(message)
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))
                if not message.get("more_body", False):
                    self._keep(key, request_id, start, b"".join(chunks))
            await send(message)

        return noting

    def _keep(self, key: tuple[Any, ...], request_id: int | str, start: dict[str, Any], body: bytes) -> None:
        headers = [(name.lower(), value) for name, value in start.get("headers", [])]
        if start.get("status") != 200 or (b"content-type", b"application/json") not in headers:
            return
        try:
            response = json.loads(body)
        except ValueError:
            return
        if not isinstance(response, dict) or response.get("id") != request_id or "result" not in response:
            return
        without_id = {name: value for name, value in response.items() if name != "id"}
        encoded = json.dumps(without_id, separators=(",", ":"), ensure_ascii=False).encode()
        self._answers[key] = ([(n, v) for n, v in headers if n != b"content-length"], encoded[1:])
        if len(self._answers) > self.max_entries:
            self._answers.popitem(last=False)


def _with_id(request_id: int | str, rest: bytes) -> bytes:
    """A kept answer with `request_id` as its first member: only the id is encoded (ASCII, every character a
    string may hold escaped), so no id can end the string early or change the kept members."""
    return b'{"id":' + json.dumps(request_id).encode() + b"," + rest


async def _send_json(send: Send, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [*headers, (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})
