"""The dataset fetch's one deadline: connect, headers, every redirect hop and the body draw from the same time,
and at zero the connection is closed. A loopback server (the local stack's policy allows it) trickles, stalls
or redirects slowly; each test checks the error the caller gets and that the server saw the connection closed."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler

import pytest

from mcp_backend.tools.dataset_stream import FetchPolicy
from mcp_backend.tools.errors import CallDeadlineExceeded, DatasetTemporarilyUnreachable
from mcp_backend.tools.fetch import open_dataset
from tests.loopback_http import peer_closed, serving, trickle, trickling_tls_handshake

Behaviour = Callable[[BaseHTTPRequestHandler], None]
# A byte per this many seconds: each read is quick, far under the per-operation timeout.
TRICKLE_INTERVAL = 0.05
# Long enough that a client which ignores the deadline is still connected when the server is done.
STALL_SECONDS = 3.0
# How long a test waits for the server's verdict; not a bound on the fetch.
VERDICT_WAIT = 10.0


class Origin:
    """A loopback origin answering GETs with `behaviour`; it records each path asked for and whether the client
    closed the connection before the server had finished its answer."""

    def __init__(self, behaviour: Behaviour) -> None:
        self.behaviour = behaviour
        self.paths: list[str] = []
        self.closed_early = threading.Event()
        self.finished = threading.Event()


def served(origin: Origin) -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            origin.paths.append(self.path)
            origin.behaviour(self)
            origin.finished.set()

        def log_message(self, *args: object) -> None:
            pass

    with serving(Handler) as url:
        yield url


def call_policy(seconds: float, per_operation: float = 10.0) -> FetchPolicy:
    """A synchronous call's fetch policy, `seconds` to its deadline, loopback allowed."""
    return FetchPolicy(
        allow_loopback_hosts=True,
        timeout_seconds=per_operation,
        deadline=time.monotonic() + seconds,
        deadline_seconds=seconds,
    )


def read_all(url: str, policy: FetchPolicy) -> bytes:
    with open_dataset(url, policy) as stream:
        return b"".join(stream)


def headers_trickled(origin: Origin) -> Behaviour:
    def behaviour(handler: BaseHTTPRequestHandler) -> None:
        head = b"HTTP/1.1 200 OK\r\nContent-Type: text/csv\r\nContent-Length: 8\r\n\r"
        if not trickle(handler, head, TRICKLE_INTERVAL):
            origin.closed_early.set()
            return
        handler.connection.sendall(b"\na,b\n1,2\n")  # the headers' last byte and the whole body at once

    return behaviour


def body_stalled(origin: Origin) -> Behaviour:
    def behaviour(handler: BaseHTTPRequestHandler) -> None:
        body = b"a,b\n1,2\n3,4\n"
        head = f"HTTP/1.1 200 OK\r\nContent-Type: text/csv\r\nContent-Length: {len(body)}\r\n\r\n".encode()
        handler.connection.sendall(head + body[:4])
        if peer_closed(handler.connection, STALL_SECONDS):
            origin.closed_early.set()
            return
        handler.connection.sendall(body[4:])

    return behaviour


def body_trickled_until_close(origin: Origin) -> Behaviour:
    def behaviour(handler: BaseHTTPRequestHandler) -> None:
        # No Content-Length: the body ends when the connection does.
        handler.connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/csv\r\nConnection: close\r\n\r\na,b\n")
        if not trickle(handler, b"1,2\n" * 15, TRICKLE_INTERVAL):
            origin.closed_early.set()

    return behaviour


def slow_redirects(origin: Origin, hops: int, delay: float) -> Behaviour:
    def behaviour(handler: BaseHTTPRequestHandler) -> None:
        hop = int(handler.path.removeprefix("/hop"))
        if peer_closed(handler.connection, delay):
            origin.closed_early.set()
            return
        if hop < hops:
            answer = f"HTTP/1.1 302 Found\r\nLocation: /hop{hop + 1}\r\nContent-Length: 0\r\n\r\n".encode()
        else:
            answer = b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\na,b\n"
        handler.connection.sendall(answer)

    return behaviour


@pytest.fixture
def origin(request: pytest.FixtureRequest) -> Iterator[tuple[Origin, str]]:
    made = Origin(lambda _handler: None)
    made.behaviour = request.param(made)
    for url in served(made):
        yield made, url


@pytest.mark.parametrize("origin", [headers_trickled, body_stalled], indirect=True)
def test_trickled_headers_and_a_stalled_body_end_at_the_call_deadline(origin: tuple[Origin, str]) -> None:
    # Given a server that sends its response headers one byte at a time, or part of its body and then nothing,
    # each read well within the read timeout
    server, url = origin

    # When a synchronous call with a 0.5 s deadline fetches from it
    with pytest.raises(CallDeadlineExceeded) as failed:
        read_all(f"{url}/d.csv", call_policy(0.5))

    # Then the call fails naming its deadline (a tool error, see tools/errors.py), and the server saw the
    # connection closed before its answer was out: the fetch ended at the deadline, not when bytes next arrived
    assert "0.5 s deadline" in str(failed.value)
    assert server.closed_early.wait(VERDICT_WAIT)


@pytest.mark.parametrize("origin", [body_trickled_until_close], indirect=True)
def test_a_body_that_ends_with_its_connection_is_not_taken_as_complete_when_the_deadline_cuts_it(
    origin: tuple[Origin, str],
) -> None:
    # Given a body without a length (it ends when the connection closes), trickled
    server, url = origin

    # When a job's fetch (no call deadline; the fetch's own 0.5 s) reads it and the deadline closes the connection
    with pytest.raises(DatasetTemporarilyUnreachable) as failed:
        read_all(f"{url}/d.csv", FetchPolicy(allow_loopback_hosts=True, fetch_deadline_seconds=0.5))

    # Then the caller gets the deadline error, not the truncated bytes as a whole dataset
    assert "0.5 s deadline" in str(failed.value)
    assert server.closed_early.wait(VERDICT_WAIT)


@pytest.mark.parametrize("origin", [lambda origin: slow_redirects(origin, hops=3, delay=0.4)], indirect=True)
def test_redirect_hops_share_one_deadline(origin: tuple[Origin, str]) -> None:
    # Given a chain of three redirects, each answered after 0.4 s: under the 1 s per-operation timeout
    server, url = origin

    # When a synchronous call with a 0.6 s deadline follows it
    with pytest.raises(CallDeadlineExceeded) as failed:
        read_all(f"{url}/hop0", call_policy(0.6, per_operation=1.0))

    # Then the hops drew from one budget: the chain stopped at the deadline, before its last hop was asked for
    assert "0.6 s deadline" in str(failed.value)
    assert server.closed_early.wait(VERDICT_WAIT)
    assert "/hop3" not in server.paths


@pytest.mark.parametrize("origin", [headers_trickled], indirect=True)
def test_a_job_fetch_ends_at_its_own_deadline_as_a_transient_failure(origin: tuple[Origin, str]) -> None:
    # Given a trickling server, and a job's fetch policy (no call deadline; the fetch's own 0.5 s)
    server, url = origin
    policy = FetchPolicy(allow_loopback_hosts=True, fetch_deadline_seconds=0.5)

    # When the worker fetches from it
    with pytest.raises(DatasetTemporarilyUnreachable) as failed:
        read_all(f"{url}/d.csv", policy)

    # Then the fetch fails naming its deadline, as a failure a retry may get past, and the connection was closed
    assert "0.5 s deadline" in str(failed.value)
    assert server.closed_early.wait(VERDICT_WAIT)


@pytest.mark.parametrize("origin", [lambda origin: slow_redirects(origin, hops=1, delay=0.0)], indirect=True)
def test_a_fetch_within_its_deadline_reads_the_whole_dataset(origin: tuple[Origin, str]) -> None:
    # Given a prompt server that redirects once
    server, url = origin

    # When a synchronous call with a generous deadline fetches from it
    body = read_all(f"{url}/hop0", call_policy(30.0))

    # Then both hops were made and the body read whole; the connection was never cut
    assert body == b"a,b\n"
    assert server.paths == ["/hop0", "/hop1"]
    assert not server.closed_early.is_set()


def test_a_trickled_tls_handshake_ends_at_the_call_deadline() -> None:
    # Given a server that answers the TLS ClientHello with a record header, then the record one byte at a time
    with trickling_tls_handshake(TRICKLE_INTERVAL) as (port, closed_early):
        # When a synchronous call with a 0.5 s deadline fetches an https URL from it
        with pytest.raises(CallDeadlineExceeded) as failed:
            read_all(f"https://127.0.0.1:{port}/d.csv", call_policy(0.5))

        # Then the handshake ends at the deadline: the call fails naming it, and the server saw the connection closed
        assert "0.5 s deadline" in str(failed.value)
        assert closed_early.wait(VERDICT_WAIT)
