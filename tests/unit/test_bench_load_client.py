"""The endpoint bench's load client (tests/bench/load.py) against a loopback server: it counts only complete
answers holding a JSON-RPC result, whether a JSON body or an event stream, over keep-alive connections, and a
phase with any other answer fails (a fast error is not a fast server)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import uvicorn

from tests.bench.load import phase

RESULT = json.dumps({"jsonrpc": "2.0", "id": 1, "result": {"tools": []}}).encode()


class Answers:
    """An ASGI app answering every POST as `mode` says, and counting the connections it was reached over."""

    def __init__(self) -> None:
        self.mode = "json"
        self.clients: set[tuple[str, int]] = set()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        self.clients.add(tuple(scope["client"]))
        while (await receive()).get("more_body", False):
            pass
        if self.mode == "unauthorized":
            await send({"type": "http.response.start", "status": 401, "headers": [(b"content-length", b"0")]})
            await send({"type": "http.response.body", "body": b""})
        elif self.mode == "stream":  # no content-length: chunked, in two pieces
            await send(
                {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]}
            )
            await send({"type": "http.response.body", "body": b"event: message\r\n", "more_body": True})
            await send({"type": "http.response.body", "body": b"data: " + RESULT + b"\r\n\r\n"})
        else:
            length = str(len(RESULT)).encode()
            headers = [(b"content-type", b"application/json"), (b"content-length", length)]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": RESULT})


@pytest.fixture
def server() -> Iterator[tuple[str, Answers]]:
    answers = Answers()
    config = uvicorn.Config(answers, host="127.0.0.1", port=0, log_level="warning", lifespan="off")
    running = uvicorn.Server(config)
    thread = threading.Thread(target=running.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not running.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the loopback server did not start"
        thread.join(0.01)
    port = running.servers[0].sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}/mcp", answers
    running.should_exit = True
    thread.join(10)


@pytest.mark.parametrize("mode", ["json", "stream"])
def test_a_phase_counts_every_complete_result_over_its_connections(server, mode):
    # Given a loopback server answering each POST with a JSON-RPC result, as a JSON body or an event stream
    url, answers = server
    answers.mode = mode

    # When a phase sends 40 requests over 4 keep-alive connections
    figures = asyncio.run(phase(url, {"content-type": "application/json"}, b"{}", requests=40, connections=4))

    # Then all 40 were answered in full, over 4 connections, with their rate and latencies
    assert figures["requests"] == 40 and figures["connections"] == 4
    assert len(answers.clients) == 4
    assert figures["rps"] > 0 and 0 < figures["p50_ms"] <= figures["p99_ms"]


def test_a_phase_with_an_answer_that_is_no_result_fails(server):
    # Given a loopback server refusing every request (401)
    url, answers = server
    answers.mode = "unauthorized"

    # When a phase runs, then it fails naming the status
    with pytest.raises(RuntimeError, match="HTTP 401"):
        asyncio.run(phase(url, {}, b"{}", requests=4, connections=1))
