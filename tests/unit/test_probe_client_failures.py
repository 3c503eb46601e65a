"""How a probe fails, as the OnFailure envelope will show it: one typed error per way an endpoint misbehaves."""

from __future__ import annotations

import functools
import ipaddress
import time
import tracemalloc
import zlib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler

import anyio
import mcp.client.streamable_http
import mcp.shared.exceptions
import pytest

import mcp_backend.probes.pinning
from mcp_backend.probes.client import MAX_PROBE_RESPONSE_BYTES, ProbeRequest, probe
from mcp_backend.probes.errors import (
    ProbeHttpStatus,
    ProbeProtocolError,
    ProbeResponseTooLarge,
    ProbeTimeout,
    ProbeUnreachable,
)
from tests.loopback_http import serving, trickling

# What a probe imports on its first run, loaded before a test traces the memory one probe takes.
PROBE_IMPORTS = (mcp.client.streamable_http, mcp.shared.exceptions, mcp_backend.probes.pinning)


def serve(behaviour) -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            behaviour(self)

        def log_message(self, *args):
            pass

    with serving(Handler) as url:
        yield f"{url}/mcp"


def answer(status: int, body: bytes = b"", content_type: str = "text/plain"):
    def behaviour(handler: BaseHTTPRequestHandler) -> None:
        handler.rfile.read(int(handler.headers.get("content-length", 0)))
        handler.send_response(status)
        handler.send_header("content-type", content_type)
        handler.send_header("content-length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    return behaviour


def hang(handler: BaseHTTPRequestHandler) -> None:
    time.sleep(3)


def run_probe(url: str, timeout: float = 5.0) -> dict:
    request = ProbeRequest(
        server_id="srv",
        url=url,
        auth_token=None,
        timeout_seconds=timeout,
        degraded_latency_ms=2000,
        addresses=(ipaddress.ip_address("127.0.0.1"),),
    )
    return anyio.run(probe, request)


@pytest.fixture
def endpoint(request) -> Iterator[str]:
    yield from serve(request.param)


@pytest.mark.parametrize("endpoint", [answer(503, b"maintenance")], indirect=True)
def test_an_http_error_status_is_a_probe_http_status_error(endpoint):
    # Given an endpoint answering 503 / When it is probed / Then the error names the status, not the body
    with pytest.raises(ProbeHttpStatus) as failed:
        run_probe(endpoint)
    assert "503" in str(failed.value) and "maintenance" not in str(failed.value)


@pytest.mark.parametrize("endpoint", [hang], indirect=True)
def test_an_endpoint_that_never_answers_is_a_probe_timeout_within_the_deadline(endpoint):
    # Given an endpoint that holds every request / When it is probed with a 1 s deadline
    started = time.monotonic()
    with pytest.raises(ProbeTimeout):
        run_probe(endpoint, timeout=1.0)
    # Then the probe gave up on its own deadline, before the endpoint would have answered
    assert time.monotonic() - started < 2.9


def test_an_endpoint_that_trickles_its_answer_is_a_probe_timeout_and_its_connection_closed():
    # Given an endpoint that sends its response headers one byte at a time, each byte well within any read timeout
    head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"
    with trickling(head) as (url, closed_early):
        # When it is probed with a 0.5 s deadline
        # Then the probe is a timeout, and the endpoint saw the connection closed before its answer was out
        with pytest.raises(ProbeTimeout):
            run_probe(f"{url}/mcp", timeout=0.5)
        assert closed_early.wait(10)


@pytest.mark.parametrize("endpoint", [answer(200, b"<html>hello</html>", "text/html")], indirect=True)
def test_a_web_page_instead_of_an_mcp_server_is_a_protocol_error(endpoint):
    with pytest.raises(ProbeProtocolError):
        run_probe(endpoint)


def test_a_closed_port_is_unreachable():
    # Given a port nothing listens on
    import socket

    with socket.socket() as probe_socket:
        probe_socket.bind(("127.0.0.1", 0))
        port = probe_socket.getsockname()[1]
    # When / Then
    with pytest.raises(ProbeUnreachable):
        run_probe(f"http://127.0.0.1:{port}/mcp")


def endless_json(handler: BaseHTTPRequestHandler) -> None:
    """A JSON answer far larger than any MCP handshake, streamed without a length."""
    handler.rfile.read(int(handler.headers.get("content-length", 0)))
    handler.send_response(200)
    handler.send_header("content-type", "application/json")
    handler.end_headers()
    handler.wfile.write(b'{"jsonrpc": "2.0", "id": 1, "result": {"padding": "')
    try:
        for _ in range(64):
            handler.wfile.write(b"x" * (1024 * 1024))
    except OSError:
        pass  # the probe stopped reading


@pytest.mark.parametrize("endpoint", [endless_json], indirect=True)
def test_a_response_larger_than_the_cap_stops_the_probe_with_a_typed_error(endpoint):
    # Given an endpoint that answers the handshake with 64 MiB / When it is probed
    # Then the probe stops reading at the cap and says so (no 64 MiB held in memory)
    with pytest.raises(ProbeResponseTooLarge, match=str(MAX_PROBE_RESPONSE_BYTES)):
        run_probe(endpoint)


@functools.cache
def gzip_bomb() -> bytes:
    """200 MiB of JSON padding, gzipped to about 204 KB (built once, in 1 MiB steps)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    parts = [packer.compress(b'{"jsonrpc": "2.0", "id": 1, "result": {"padding": "')]
    mebibyte = b" " * (1024 * 1024)
    parts += [packer.compress(mebibyte) for _ in range(200)]
    parts.append(packer.flush())
    return b"".join(parts)


def gzipped_answer(handler: BaseHTTPRequestHandler) -> None:
    """Gzip although the probe asked for identity: the encoding decides nothing about what the probe holds."""
    handler.rfile.read(int(handler.headers.get("content-length", 0)))
    body = gzip_bomb()
    handler.send_response(200)
    handler.send_header("content-type", "application/json")
    handler.send_header("content-encoding", "gzip")
    handler.send_header("content-length", str(len(body)))
    handler.end_headers()
    try:
        handler.wfile.write(body)
    except OSError:
        pass  # the probe stopped reading


@pytest.mark.parametrize("endpoint", [gzipped_answer], indirect=True)
def test_a_gzip_bomb_stops_at_the_cap_on_its_decoded_bytes(endpoint):
    # Given an endpoint whose handshake answer is 204 KB of gzip that decodes to 200 MiB
    assert len(gzip_bomb()) < 250_000

    # When it is probed, with the memory the probe allocates traced
    tracemalloc.start()
    try:
        with pytest.raises(ProbeResponseTooLarge, match=str(MAX_PROBE_RESPONSE_BYTES)) as failed:
            run_probe(endpoint)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    # Then the probe stopped at the cap on what the answer decodes to, naming the cap, and never held the
    # decoded answer (a few times the cap at most, far from 200 MiB)
    assert "srv" in str(failed.value)
    assert peak < 4 * MAX_PROBE_RESPONSE_BYTES


def deflated_answer(handler: BaseHTTPRequestHandler) -> None:
    """A small, honest handshake error, deflated: decoded and judged like an identity answer."""
    handler.rfile.read(int(handler.headers.get("content-length", 0)))
    body = zlib.compress(b"<html>not an MCP server</html>")
    handler.send_response(200)
    handler.send_header("content-type", "text/html")
    handler.send_header("content-encoding", "deflate")
    handler.send_header("content-length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


@pytest.mark.parametrize("endpoint", [deflated_answer], indirect=True)
def test_a_small_compressed_answer_is_decoded_and_judged_as_usual(endpoint):
    # Given an endpoint answering a deflated web page / When it is probed / Then it is a protocol error, not a cap
    with pytest.raises(ProbeProtocolError):
        run_probe(endpoint)


def brotli_answer(handler: BaseHTTPRequestHandler) -> None:
    handler.rfile.read(int(handler.headers.get("content-length", 0)))
    handler.send_response(200)
    handler.send_header("content-type", "application/json")
    handler.send_header("content-encoding", "br")
    handler.send_header("content-length", "4")
    handler.end_headers()
    handler.wfile.write(b"\x0b\x01\x80\x03")


@pytest.mark.parametrize("endpoint", [brotli_answer], indirect=True)
def test_a_content_coding_the_probe_does_not_decode_is_a_protocol_error_naming_it(endpoint):
    # Given an endpoint answering in brotli, which the probe neither asked for nor decodes
    # When it is probed / Then it is a protocol error naming the coding
    with pytest.raises(ProbeProtocolError, match=r"endpoint srv: .*content coding.*\(br\)"):
        run_probe(endpoint)
