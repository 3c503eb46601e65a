"""A loopback HTTP server for tests that need something to answer on 127.0.0.1."""

from __future__ import annotations

import http.server
import select
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def serving(handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[str]:
    """`handler` served on a free loopback port by a thread per request; yields `http://127.0.0.1:<port>`."""
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler) as server:
        server.daemon_threads = True  # a request still being answered does not hold the shutdown
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}"
        finally:
            server.shutdown()
            thread.join(timeout=10)


def answer_empty(handler: http.server.BaseHTTPRequestHandler, status: int = 200) -> None:
    """Answer the request `handler` is serving with `status` and no body (the connection may stay open)."""
    handler.send_response(status)
    handler.send_header("content-length", "0")
    handler.end_headers()


def peer_closed(connection: socket.socket, wait: float = 0.0) -> bool:
    """True once the client has closed the connection, waiting up to `wait` seconds for it. The clients here
    send nothing while they wait for an answer, so a readable socket means end of stream (or a reset)."""
    readable, _, _ = select.select([connection], [], [], wait)
    if not readable:
        return False
    try:
        return connection.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


def trickle(handler: http.server.BaseHTTPRequestHandler, data: bytes, interval: float) -> bool:
    """Send `data` one byte per `interval`; False, and stop, as soon as the client has closed the connection."""
    for byte in data:
        if peer_closed(handler.connection, interval):
            return False
        try:
            handler.connection.sendall(bytes([byte]))
        except OSError:
            return False
    return True


@contextmanager
def trickling(answer: bytes, interval: float = 0.05, head: bytes = b"") -> Iterator[tuple[str, threading.Event]]:
    """A loopback server answering each GET or POST with `head` at once, then `answer` one byte per `interval`;
    yields its URL and an event set once a client closed the connection before the whole answer was out."""
    closed_early = threading.Event()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.rfile.read(int(self.headers.get("content-length", 0)))
            self.connection.sendall(head)
            if not trickle(self, answer, interval):
                closed_early.set()

        do_POST = do_GET

        def log_message(self, *args: object) -> None:
            pass

    with serving(Handler) as url:
        yield url, closed_early


@contextmanager
def trickling_tls_handshake(interval: float = 0.05) -> Iterator[tuple[int, threading.Event]]:
    """A loopback port whose server answers a TLS ClientHello with a record header, then the record one byte per
    `interval`; yields the port and an event set once the client closed the connection mid-handshake."""
    closed_early = threading.Event()
    with socket.create_server(("127.0.0.1", 0)) as listener:

        def serve() -> None:
            connection, _ = listener.accept()
            with connection:
                connection.recv(4096)  # the ClientHello
                connection.sendall(bytes([0x16, 0x03, 0x03, 0x40, 0x00]))  # a 16 KiB handshake record follows
                for _ in range(60):
                    if peer_closed(connection, interval):
                        closed_early.set()
                        return
                    connection.sendall(b"\x00")

        threading.Thread(target=serve, daemon=True).start()
        yield listener.getsockname()[1], closed_early
