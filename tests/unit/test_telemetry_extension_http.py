"""The call-log-telemetry extension's HTTP/1.1 on loopback (loopback_http), against the standard library's own
client and server: the listener the Telemetry API posts to, and the requests to the Extensions API."""

from __future__ import annotations

import http.client
import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest

from mcp_backend.telemetry_extension.loopback_http import MAX_BODY_BYTES, Listener, MalformedHttp, request


@pytest.fixture
def listener() -> Iterator[tuple[Listener, list[bytes]]]:
    delivered: list[bytes] = []
    served = Listener("127.0.0.1")
    served.serve(delivered.append)
    yield served, delivered
    served.close()


def raw_exchange(port: int, data: bytes) -> bytes:
    """Send bytes as they are and read everything the listener answers until it closes the connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as connection:
        connection.sendall(data)
        answer = b""
        while chunk := connection.recv(65536):
            answer += chunk
    return answer


def test_batches_from_an_http_client_are_each_delivered_and_answered(listener):
    # Given the listener and the standard library's HTTP/1.1 client
    served, delivered = listener
    client = http.client.HTTPConnection("127.0.0.1", served.port, timeout=5)
    batches = [[{"type": "platform.start"}], [{"type": "platform.report"}]]

    # When it posts two batches with Content-Length and one chunked
    statuses = []
    for batch in batches:
        client.request("POST", "/", body=json.dumps(batch).encode(), headers={"Content-Type": "application/json"})
        response = client.getresponse()
        statuses.append((response.status, response.read()))
    client.request("POST", "/", body=iter([b'[{"type": ', b'"platform.runtimeDone"}]']), encode_chunked=True)
    chunked = client.getresponse()
    statuses.append((chunked.status, chunked.read()))
    client.close()

    # Then each body was delivered whole and in order, each answered 200 with an empty body
    assert [json.loads(body) for body in delivered] == [*batches, [{"type": "platform.runtimeDone"}]]
    assert statuses == [(200, b"")] * 3


def test_a_kept_alive_connection_carries_one_batch_after_another(listener):
    # Given the listener and one connection, kept alive as the Telemetry API keeps it
    served, delivered = listener
    with socket.create_connection(("127.0.0.1", served.port), timeout=5) as connection:
        # When a batch is posted, answered, and the next one follows on the same connection
        connection.sendall(b"POST / HTTP/1.1\r\nContent-Length: 3\r\n\r\n[1]")
        first = connection.recv(65536)
        connection.sendall(b"POST / HTTP/1.1\r\nContent-Length: 3\r\nConnection: close\r\n\r\n[2]")
        second = b""
        while chunk := connection.recv(65536):
            second += chunk

    # Then both were answered 200 on it (the first without closing it) and delivered in order
    assert first == b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
    assert second == b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    assert delivered == [b"[1]", b"[2]"]


def test_a_post_sent_before_the_listener_serves_waits_and_is_delivered():
    # Given a listener bound (its port known, as the subscription names it) but not serving yet
    delivered: list[bytes] = []
    early = Listener("127.0.0.1")
    answers: list[bytes] = []
    sender = threading.Thread(
        target=lambda: answers.append(
            raw_exchange(early.port, b"POST / HTTP/1.1\r\nContent-Length: 2\r\nConnection: close\r\n\r\n[]")
        )
    )
    sender.start()

    # When it starts serving after the POST was sent
    sender.join(0.2)
    early.serve(delivered.append)
    sender.join(5)
    early.close()

    # Then the POST was answered and delivered
    assert answers and answers[0].startswith(b"HTTP/1.1 200 OK\r\n")
    assert delivered == [b"[]"]


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", b"400"),
        (b"POST / HTTP/1.1\r\nContent-Length: 1_0\r\n\r\n0123456789", b"400"),
        (b"POST / HTTP/1.1\r\nContent-Length: " + str(MAX_BODY_BYTES + 1).encode() + b"\r\n\r\n", b"400"),
        (b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", b"400"),
        (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", b"400"),
        (b"POST / HTTP/1.1\r\nNo colon here\r\n\r\n", b"400"),
        (b"POST / HTTP/1.1\r\nX: " + b"a" * 70000 + b"\r\n\r\n", b"400"),
        (b"GET / HTTP/1.1\r\n\r\n", b"405"),
    ],
    ids=["negative-length", "underscored-length", "too-large", "unknown-coding", "bad-chunk", "bad-header",
         "huge-header", "not-post"],
)  # fmt: skip
def test_a_malformed_or_unexpected_request_is_refused_and_nothing_is_delivered(listener, request_bytes, status):
    # Given the listener
    served, delivered = listener

    # When a request it does not accept arrives
    answer = raw_exchange(served.port, request_bytes)

    # Then it answers the error status, closes the connection and delivers nothing
    assert answer.split(b" ", 2)[1] == status and b"Connection: close" in answer
    assert delivered == []


class StandInApi(BaseHTTPRequestHandler):
    """Answers as the test's `answer` says: Content-Length, chunked, or (HTTP/1.0) a body ended by closing."""

    answer = "length"
    seen: ClassVar[list[tuple[str, str, dict[str, str], bytes]]] = []

    def do_PUT(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        StandInApi.seen.append((self.command, self.path, dict(self.headers), body))
        payload = b'{"ok": true}'
        if self.answer == "chunked":
            self.protocol_version = "HTTP/1.1"
            self.send_response(202)
            self.send_header("Transfer-Encoding", "chunked")
            self.send_header("Lambda-Extension-Identifier", "ext-1")
            self.end_headers()
            self.wfile.write(b"5\r\n" + payload[:5] + b"\r\n7\r\n" + payload[5:] + b"\r\n0\r\n\r\n")
            return
        self.send_response(202)
        self.send_header("Lambda-Extension-Identifier", "ext-1")
        if self.answer == "length":
            self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def api() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), StandInApi)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    StandInApi.seen = []
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("framing", ["length", "chunked", "until-close"])
def test_a_request_reads_the_answer_however_it_is_framed(api, framing):
    # Given the API answering with the body framed this way
    StandInApi.answer = framing

    # When the extension sends a request with a JSON body and a header of its own
    answer = request(api, "PUT", "/2022-07-01/telemetry", {"Lambda-Extension-Identifier": "ext-1"}, b"{}", 5)

    # Then the answer's status, headers (names lower-cased) and whole body come back, and the API saw the request
    assert (answer.status(), answer.headers["lambda-extension-identifier"]) == (202, "ext-1")
    assert answer.body == b'{"ok": true}'
    [(method, path, headers, body)] = StandInApi.seen
    assert (method, path, body) == ("PUT", "/2022-07-01/telemetry", b"{}")
    assert headers["Lambda-Extension-Identifier"] == "ext-1" and headers["Content-Type"] == "application/json"


def test_a_connection_closed_without_an_answer_is_an_error():
    # Given an address that reads the request and closes without answering
    def read_and_close(server: socket.socket) -> None:
        connection = server.accept()[0]
        with connection:
            request_bytes = b""
            while b"\r\n\r\n" not in request_bytes:
                request_bytes += connection.recv(65536)

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        port = server.getsockname()[1]
        closer = threading.Thread(target=read_and_close, args=(server,))
        closer.start()

        # When a request goes there, then it fails as malformed HTTP, not with an answer
        with pytest.raises(MalformedHttp):
            request(f"127.0.0.1:{port}", "GET", "/2020-01-01/extension/event/next", {}, None, 5)
        closer.join(5)


def test_a_header_value_with_a_line_break_is_never_sent(api):
    # Given a header value carrying a line break (an identifier as some answer gave it)
    smuggled = {"Lambda-Extension-Identifier": "ext-1\r\nX-Injected: 1"}

    # When the extension would send it, then it refuses, and the API received nothing
    with pytest.raises(ValueError):
        request(api, "PUT", "/2022-07-01/telemetry", smuggled, b"{}", 5)
    assert StandInApi.seen == []
