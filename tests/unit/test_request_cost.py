"""A request's cost grows linearly with its size and is bounded: the HTTP guard refuses a body over the cap with
413 before reading or parsing more of it, and its nesting pre-scan costs an adversarial body about what it costs
a benign one of the same size (a ratio of two measurements in one run, never an absolute time)."""

from __future__ import annotations

import json
import time

import anyio
import httpx
import pytest

from mcp_backend.mcp.guard import MAX_JSON_DEPTH, HostPolicy, McpHttpGuard, json_nesting_exceeds
from tests.unit.endpoint_fakes import EveryoneIsAlice

HOST = "mcp.example.com"
# A quadratic scan is hundreds of times slower at these sizes; a linear one stays within a small factor.
MAX_COST_RATIO = 8.0


class Echo:
    """The inner app: counts the requests that reached it."""

    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, scope, receive, send) -> None:
        self.calls += 1
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": b"{}", "more_body": False})


def guard(inner: Echo, max_body_bytes: int) -> McpHttpGuard:
    return McpHttpGuard(
        inner,
        path="/mcp",
        hosts=HostPolicy(hosts=(HOST,)),
        authenticator=EveryoneIsAlice(),
        max_body_bytes=max_body_bytes,
    )


def post(app: McpHttpGuard, body: object, headers: dict[str, str] | None = None) -> httpx.Response:
    async def send() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=f"https://{HOST}") as client:
            sent = {"content-type": "application/json", "authorization": "Bearer k", **(headers or {})}
            return await client.post("/mcp", content=body, headers=sent)

    return anyio.run(send)


def adversarial_body(size: int) -> bytes:
    """Escaped quotes with no closing quote, then brackets past the nesting limit: each quote starts a string that
    a backtracking scan follows to the end of the body."""
    tail = b"[" * (MAX_JSON_DEPTH + 6)
    return b'{"a":"' + b'\\"' * ((size - len(tail) - 6) // 2) + tail


def benign_body(size: int) -> bytes:
    """A real batch call of the same size: many small objects (so the scan runs), strings with escapes."""
    item = {"datasetUrl": "s3://bucket/tenant-a/data.csv", "columns": ["a", "b"], "note": 'say \\"hi\\"'}
    items = [item] * (size // len(json.dumps(item)))
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "x", "arguments": {"items": items}}}
    return json.dumps(call).encode()[:size]


def cost(body: bytes) -> float:
    """The pre-scan's CPU time for `body`: the least of a few runs (the least is the one nothing interrupted)."""
    runs = []
    for _ in range(5):
        started = time.process_time()
        json_nesting_exceeds(body, MAX_JSON_DEPTH)
        runs.append(time.process_time() - started)
    return max(min(runs), 1e-6)


@pytest.mark.parametrize("size", [16 * 1024, 128 * 1024])
def test_an_adversarial_body_costs_the_nesting_scan_no_more_than_a_benign_one_of_its_size(size):
    # Given an adversarial body and a benign one of the same size
    adversarial, benign = adversarial_body(size), benign_body(size)
    assert abs(len(adversarial) - len(benign)) <= size // 100

    # When the guard's nesting pre-scan measures each
    ratio = cost(adversarial) / cost(benign)

    # Then the adversarial one costs at most a small constant times the benign one
    assert ratio <= MAX_COST_RATIO, f"adversarial/benign scan cost {ratio:.1f}x at {size} bytes"


def test_an_unclosed_string_hides_the_brackets_after_it():
    # Given a body whose last string never closes, with brackets past the limit inside it
    body = b'{"a":"' + b"[" * (MAX_JSON_DEPTH + 1)
    # When it is measured / Then nothing is nested (the SDK's parser rejects the body as it is)
    assert json_nesting_exceeds(body, MAX_JSON_DEPTH) is False
    # And a lone backslash at the very end is no different
    assert json_nesting_exceeds(body + b"\\", MAX_JSON_DEPTH) is False


def test_a_body_over_the_cap_is_a_413_and_never_reaches_the_sdk():
    # Given a guard capping bodies at 1 KiB
    inner = Echo()
    app = guard(inner, 1024)

    # When a body of 1 KiB + 1 byte is posted
    response = post(app, b" " * 1025)

    # Then it is a 413 JSON-RPC error naming the cap, and the SDK never ran
    assert response.status_code == 413
    assert "1024" in response.json()["error"]["message"]
    assert inner.calls == 0


def test_a_chunked_body_without_length_is_cut_off_at_the_cap():
    # Given a guard capping bodies at 1 KiB and a client streaming a body with no Content-Length
    inner = Echo()
    app = guard(inner, 1024)
    chunks_read = []

    async def chunks():
        for index in range(64):
            chunks_read.append(index)
            yield b" " * 512

    # When it is posted
    response = post(app, chunks())

    # Then it is a 413, the SDK never ran, and the guard stopped reading near the cap
    assert response.status_code == 413
    assert inner.calls == 0
    assert len(chunks_read) < 64


def test_a_body_at_the_cap_is_served():
    # Given a guard capping bodies at 1 KiB
    inner = Echo()
    app = guard(inner, 1024)
    # When a body of exactly 1 KiB is posted / Then it reaches the SDK
    assert post(app, b"{}" + b" " * 1022).status_code == 200
    assert inner.calls == 1
