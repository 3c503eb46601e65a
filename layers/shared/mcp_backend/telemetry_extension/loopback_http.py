"""HTTP/1.1 as the extension speaks it, on the socket module alone: one request and its answer to the Extensions
and Telemetry APIs, and the listener the Telemetry API posts to. Lambda's init waits for the extension to
register, subscribe and ask for its first event, and http.client / http.server would put the email, ssl and
urllib packages they import on that path (docs/benchmarks.md, the extension's cold start). Both ends are
Lambda's own, inside the execution environment; what either sends is still bounded and checked here.

Sockets are AF_INET and addresses are given as names or IPv4 literals: Lambda's runtime API is IPv4 loopback
($AWS_LAMBDA_RUNTIME_API, host:port), and connect/bind resolve an ASCII name in C, where getaddrinfo and
gethostbyname would import the idna codec (with re and unicodedata) first."""

from __future__ import annotations

import io
import socket
import threading
from collections.abc import Callable

MAX_LINE_BYTES = 8192
MAX_HEAD_BYTES = 65536
# The Telemetry API posts batches of up to 2 * maxBytes plus its metadata (telemetry-api.html, "Configuring
# memory usage and buffering"); the subscription's maxBytes is 262,144, the API's largest 1,048,576.
MAX_BODY_BYTES = 4 * 1024 * 1024
LINGER_SECONDS = 1.0  # how long a refused client gets to finish sending before its connection is closed


class MalformedHttp(Exception):
    """What the other end sent is not an HTTP/1.1 message this module accepts."""


class Message:
    """One request or response: its start line, its headers (names lower-cased, the last one of a name wins) and
    its body (chunked transfer coding removed)."""

    __slots__ = ("body", "headers", "start_line")

    def __init__(self, start_line: str, headers: dict[str, str], body: bytes) -> None:
        self.start_line = start_line
        self.headers = headers
        self.body = body

    def status(self) -> int:
        """A response's status code (HTTP/1.1 200 OK -> 200)."""
        parts = self.start_line.split(" ", 2)
        if len(parts) < 2 or len(parts[1]) != 3 or not parts[1].isdigit():
            raise MalformedHttp(f"bad status line {self.start_line[:40]!r}")
        return int(parts[1])

    def keeps_alive(self) -> bool:
        """Whether the connection carries another message after this one (HTTP/1.1 unless it says close)."""
        connection = self.headers.get("connection", "").lower()
        if self.start_line.endswith("HTTP/1.0"):
            return connection == "keep-alive"
        return connection != "close"


def read_message(reader: io.BufferedReader, *, body_to_eof: bool) -> Message | None:
    """The next message from a buffered reader (socket.makefile("rb")); None if the other end closed before one
    began. `body_to_eof`: a response without Content-Length or chunking ends when the connection does."""
    start = _line(reader)
    if not start:
        return None
    headers: dict[str, str] = {}
    head_bytes = len(start)
    while (line := _line(reader)) not in (b"\r\n", b"\n"):
        head_bytes += len(line)
        if not line or head_bytes > MAX_HEAD_BYTES:
            raise MalformedHttp("header section unterminated or too large")
        name, colon, value = line.decode("latin-1").partition(":")
        if not colon or not name or name != name.strip():
            raise MalformedHttp("malformed header line")
        headers[name.lower()] = value.strip()
    return Message(start.decode("latin-1").rstrip("\r\n"), headers, _body(reader, headers, body_to_eof))


def _line(reader: io.BufferedReader) -> bytes:
    line = reader.readline(MAX_LINE_BYTES + 1)
    if len(line) > MAX_LINE_BYTES:
        raise MalformedHttp("line too long")
    return line


def _body(reader: io.BufferedReader, headers: dict[str, str], to_eof: bool) -> bytes:
    if "transfer-encoding" in headers:
        if headers["transfer-encoding"].lower() != "chunked":
            raise MalformedHttp("unsupported transfer coding")
        return _chunked(reader)
    if "content-length" in headers:
        return _exactly(reader, _size(headers["content-length"], DECIMAL))
    if not to_eof:
        return b""
    body = reader.read(MAX_BODY_BYTES + 1)
    if len(body) > MAX_BODY_BYTES:
        raise MalformedHttp("body too large")
    return body


def _chunked(reader: io.BufferedReader) -> bytes:
    chunks, total = [], 0
    while size := _size(_line(reader).split(b";", 1)[0].decode("latin-1"), HEXADECIMAL):
        total += size
        if total > MAX_BODY_BYTES:
            raise MalformedHttp("body too large")
        chunks.append(_exactly(reader, size))
        if _line(reader) not in (b"\r\n", b"\n"):
            raise MalformedHttp("chunk not terminated")
    while _line(reader) not in (b"\r\n", b"\n", b""):  # trailer fields, ignored
        pass
    return b"".join(chunks)


DECIMAL = "0123456789"
HEXADECIMAL = "0123456789abcdefABCDEF"


def _size(text: str, digits: str) -> int:
    """A Content-Length (DECIMAL) or chunk size (HEXADECIMAL): digits only (int() would take signs, spaces and
    underscores), and bounded."""
    value = text.strip()
    if not value or len(value) > 16 or any(c not in digits for c in value):
        raise MalformedHttp(f"bad size {text[:20]!r}")
    size = int(value, 10 if digits is DECIMAL else 16)
    if size > MAX_BODY_BYTES:
        raise MalformedHttp("body too large")
    return size


def _exactly(reader: io.BufferedReader, size: int) -> bytes:
    data = reader.read(size)
    if len(data) != size:
        raise MalformedHttp("connection closed inside the body")
    return data


def request(
    address: str, method: str, path: str, headers: dict[str, str], body: bytes | None, timeout: float | None
) -> Message:
    """One request on a connection of its own, closed after the answer (Lambda's local API, host:port)."""
    host, _, port = address.rpartition(":")
    lines = [f"{method} {path} HTTP/1.1", f"Host: {address}", "Connection: close"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    if any("\r" in line or "\n" in line for line in lines):  # e.g. an identifier from an answer, sent back
        raise ValueError("a request line or header holds a line break")
    if body is not None:
        lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as connection:
        connection.settimeout(timeout)
        connection.connect((host, int(port)))
        connection.sendall("\r\n".join(lines).encode("latin-1") + b"\r\n\r\n" + (body or b""))
        with connection.makefile("rb") as reader:
            answer = read_message(reader, body_to_eof=True)
    if answer is None or not answer.start_line.startswith("HTTP/1."):
        raise MalformedHttp(f"{method} {path}: no HTTP answer")
    return answer


class Listener:
    """The telemetry listener: a socket bound and listening from construction (a POST that arrives before
    `serve` waits in the kernel's backlog), then each connection served on a thread of its own, kept alive as
    the client asks; every POST body goes to `deliver` and is answered 200 with an empty body, anything else
    400 or 405, and the connection closed."""

    def __init__(self, host: str, fallback_host: str = "127.0.0.1") -> None:
        self.socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            self.socket.bind((host, 0))
        except OSError:  # the name does not resolve here (outside Lambda)
            self.socket.bind((fallback_host, 0))
        self.socket.listen(16)
        self.port: int = self.socket.getsockname()[1]

    def serve(self, deliver: Callable[[bytes], None]) -> None:
        """Accept connections on a daemon thread; `deliver(body: bytes)` is called for each POST, in order per
        connection."""
        threading.Thread(target=self._accept, args=(deliver,), name="telemetry-listener", daemon=True).start()

    def close(self) -> None:
        try:
            self.socket.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread (close alone does not, on Linux)
        except OSError:
            pass
        self.socket.close()

    def _accept(self, deliver: Callable[[bytes], None]) -> None:
        while True:
            try:
                connection, _ = self.socket.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._converse, args=(connection, deliver), daemon=True).start()

    def _converse(self, connection: socket.socket, deliver: Callable[[bytes], None]) -> None:
        # No idle timeout: the Telemetry API keeps its connection for the next batch, which may come after the
        # environment was frozen and thawed.
        with connection, connection.makefile("rb") as reader:
            while True:
                try:
                    message = read_message(reader, body_to_eof=False)
                except MalformedHttp:
                    _refuse(connection, "400 Bad Request")
                    return
                except OSError:
                    return  # the other end went away
                if message is None:
                    return
                if not message.start_line.startswith("POST "):
                    _refuse(connection, "405 Method Not Allowed")
                    return
                deliver(message.body)
                if not _answer(connection, "200 OK", keep_alive=message.keeps_alive()):
                    return


def _answer(connection: socket.socket, status: str, keep_alive: bool) -> bool:
    """Send a response without a body; whether the connection stays open for another request."""
    close = "" if keep_alive else "Connection: close\r\n"
    try:
        connection.sendall(f"HTTP/1.1 {status}\r\nContent-Length: 0\r\n{close}\r\n".encode("latin-1"))
    except OSError:
        return False
    return keep_alive


def _refuse(connection: socket.socket, status: str) -> None:
    """Answer an error and close, reading what the client still sends first: closing on unread bytes would reset
    the connection, and the client could lose the answer."""
    _answer(connection, status, keep_alive=False)
    try:
        connection.shutdown(socket.SHUT_WR)
        connection.settimeout(LINGER_SECONDS)
        while connection.recv(65536):
            pass
    except OSError:
        pass
