"""The dataset fetcher: scheme rules, the SSRF guard, redirects, size caps and S3 streaming."""

from __future__ import annotations

import gzip
import http.server
import ipaddress
import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from mcp_backend.netsafety import is_public_address
from mcp_backend.tools.dataset_stream import FetchPolicy
from mcp_backend.tools.errors import DatasetCompressed, DatasetTooLarge, DatasetUnreachable, UnsafeDatasetUrl
from mcp_backend.tools.fetch import open_dataset

PUBLIC_IP = "93.184.216.34"
OTHER_PUBLIC_IP = "93.184.216.35"
Handler = Callable[[httpx.Request], httpx.Response]
DNS = dict[str, list[str]]


@pytest.fixture
def dns(monkeypatch: pytest.MonkeyPatch) -> DNS:
    """A fake resolver: tests fill host -> addresses; unknown hosts fail like NXDOMAIN."""
    records: DNS = {"data.example.com": [PUBLIC_IP]}

    def getaddrinfo(host: str, port: int, *args: object, **kwargs: object) -> list[tuple]:
        if host not in records:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [
            (socket.AF_INET6, socket.SOCK_STREAM, 6, "", (address, port, 0, 0))
            if ":" in address
            else (socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))
            for address in records[host]
        ]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return records


class Server:
    """An httpx.MockTransport routing on the Host header (the URL carries the pinned IP)."""

    def __init__(self) -> None:
        self.routes: dict[tuple[str, str], Handler] = {}
        self.requests: list[httpx.Request] = []
        self.transport = httpx.MockTransport(self._handle)

    def route(self, host: str, path: str, handler: Handler) -> None:
        self.routes[(host, path)] = handler

    def serve(self, host: str, path: str, body: bytes, status: int = 200) -> None:
        self.route(host, path, lambda _request: httpx.Response(status, content=body))

    def _handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        handler = self.routes.get((request.headers["host"], request.url.path))
        return handler(request) if handler else httpx.Response(404)


@pytest.fixture
def server() -> Server:
    return Server()


def read_all(url: str, policy: FetchPolicy, server: Server) -> bytes:
    with open_dataset(url, policy, transport=server.transport) as stream:
        return b"".join(stream)


# --- https -------------------------------------------------------------------------------------------


def test_https_dataset_is_streamed_from_the_checked_address(dns: DNS, server: Server) -> None:
    # Given a public host serving a file
    server.serve("data.example.com", "/data.csv", b"a,b\n1,2\n")

    # When it is opened and read
    with open_dataset("https://data.example.com/data.csv", FetchPolicy(), transport=server.transport) as s:
        body = b"".join(s)
        bytes_read, content_length = s.bytes_read, s.content_length

    # Then the bytes arrive, counted, over a connection pinned to the resolved address
    assert body == b"a,b\n1,2\n"
    assert bytes_read == 8
    assert content_length == 8
    (request,) = server.requests
    assert request.url.host == PUBLIC_IP
    assert request.headers["host"] == "data.example.com"
    assert request.extensions["sni_hostname"] == "data.example.com"


def test_connection_falls_back_to_the_next_checked_address(dns: DNS, server: Server) -> None:
    # Given a host with two public addresses, the first refusing connections
    dns["data.example.com"] = [OTHER_PUBLIC_IP, PUBLIC_IP]

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.host == OTHER_PUBLIC_IP:
            raise httpx.ConnectError("connection refused", request=request)
        return httpx.Response(200, content=b"ok")

    server.route("data.example.com", "/d", handler)

    # When the dataset is read
    body = read_all("https://data.example.com/d", FetchPolicy(), server)

    # Then the second address served it
    assert body == b"ok"
    assert [r.url.host for r in server.requests] == [OTHER_PUBLIC_IP, PUBLIC_IP]


@pytest.mark.parametrize(
    "url",
    ["http://data.example.com/d.csv", "ftp://data.example.com/d.csv", "file:///etc/passwd", "gopher://x/"],
)
def test_schemes_other_than_https_and_s3_are_refused(dns: DNS, server: Server, url: str) -> None:
    # Given a URL with a scheme the default policy does not allow
    # When it is opened
    # Then it is refused without any request being made
    with pytest.raises(UnsafeDatasetUrl):
        read_all(url, FetchPolicy(), server)
    assert server.requests == []


def test_plain_http_to_loopback_is_allowed_by_the_local_dev_policy_and_pinned(dns: DNS, server: Server) -> None:
    # Given the local stack's policy and a plain-http service on loopback
    dns["localhost"] = ["127.0.0.1"]
    server.serve("localhost:4566", "/bucket/d.csv", b"x\n1\n")

    # When it is read
    body = read_all("http://localhost:4566/bucket/d.csv", FetchPolicy(allow_loopback_hosts=True), server)

    # Then it is fetched from the loopback address that was checked, under its own Host name
    assert body == b"x\n1\n"
    assert server.requests[0].url.host == "127.0.0.1"
    assert server.requests[0].headers["host"] == "localhost:4566"


@pytest.mark.parametrize("address", ["10.0.0.5", "192.168.0.7", "169.254.169.254", "fd00::1", "100.64.0.1"])
def test_the_local_dev_policy_refuses_private_addresses_other_than_loopback(
    dns: DNS, server: Server, address: str
) -> None:
    # Given a host on the company network, or the metadata endpoint
    dns["intranet.corp.example"] = [address]
    server.serve("intranet.corp.example", "/d.csv", b"internal")

    # When it is opened under the local stack's policy
    with pytest.raises(UnsafeDatasetUrl):
        read_all("http://intranet.corp.example/d.csv", FetchPolicy(allow_loopback_hosts=True), server)

    # Then nothing was requested
    assert server.requests == []


@pytest.mark.parametrize("allow_loopback", [False, True])
@pytest.mark.parametrize(
    ("url", "fault"),
    [
        ("https://" + "a" * 64 + ".example.com/d.csv", "63"),
        ("https://data.example.com:99999/d.csv", "port"),
        ("https://data.example.com:abc/d.csv", "port"),
        ("https://[zz]/d.csv", "IPv6"),
        ("https://[::1/d.csv", "IPv6"),
    ],
)
def test_malformed_dataset_urls_are_refused_naming_the_fault(
    dns: DNS, server: Server, url: str, fault: str, allow_loopback: bool
) -> None:
    # Given a URL whose host or port cannot be connected to, with credentials in its user info
    url = url.replace("https://", "https://alice:hunter2@", 1)

    # When it is opened, on AWS or under the local stack's policy
    with pytest.raises(UnsafeDatasetUrl) as raised:
        read_all(url, FetchPolicy(allow_loopback_hosts=allow_loopback), server)

    # Then the tool error names the fault, never the credentials, and nothing was requested
    assert fault in raised.value.message
    assert "hunter2" not in raised.value.message
    assert server.requests == []


@pytest.mark.parametrize(
    "address", ["127.0.0.1", "10.0.0.5", "169.254.169.254", "::1", "::ffff:127.0.0.1", "100.64.0.1"]
)
def test_hosts_resolving_to_non_public_addresses_are_refused(dns: DNS, server: Server, address: str) -> None:
    # Given a host whose DNS answer is loopback, private, link-local (metadata) or shared space
    dns["sneaky.example.com"] = [address]
    server.serve("sneaky.example.com", "/d.csv", b"secret")

    # When it is opened
    with pytest.raises(UnsafeDatasetUrl) as raised:
        read_all("https://sneaky.example.com/d.csv", FetchPolicy(), server)

    # Then no request is made, and the message names the host but not the address
    assert server.requests == []
    assert "sneaky.example.com" in raised.value.message
    assert address not in raised.value.message


def test_one_private_address_among_public_ones_is_enough_to_refuse(dns: DNS, server: Server) -> None:
    # Given a host resolving to a public and a private address
    dns["mixed.example.com"] = [PUBLIC_IP, "10.1.2.3"]

    # When it is opened
    # Then it is refused: the client could have connected to either
    with pytest.raises(UnsafeDatasetUrl):
        read_all("https://mixed.example.com/d.csv", FetchPolicy(), server)
    assert server.requests == []


@pytest.mark.parametrize(
    "url",
    [
        "https://127.0.0.1/d.csv",
        "https://169.254.169.254/latest/meta-data/",
        "https://[::1]/d.csv",
        "https://[::ffff:10.0.0.1]/d.csv",
        "https://[64:ff9b::a00:1]/d.csv",
    ],
)
def test_literal_non_public_ip_urls_are_refused(dns: DNS, server: Server, url: str) -> None:
    # Given a URL naming a non-public IP directly
    # When it is opened
    # Then it is refused without a request
    with pytest.raises(UnsafeDatasetUrl):
        read_all(url, FetchPolicy(), server)
    assert server.requests == []


@pytest.mark.parametrize(
    ("address", "public"),
    [
        ("93.184.216.34", True),
        ("2606:2800:220:1:248:1893:25c8:1946", True),
        ("::ffff:93.184.216.34", True),
        ("64:ff9b::5db8:d822", True),
        ("::ffff:10.0.0.1", False),
        ("64:ff9b::a00:1", False),
        ("fe80::1", False),
        ("fd00::1", False),
        ("224.0.0.1", False),
        ("0.0.0.0", False),
        ("::", False),
        ("240.0.0.1", False),
        ("192.168.1.1", False),
    ],
)
def test_public_address_classification(address: str, public: bool) -> None:
    # Given an address, IPv4 embedded in IPv6 included
    # When it is classified
    # Then only globally routable unicast addresses count as public, embedded ones judged by their IPv4
    assert is_public_address(ipaddress.ip_address(address)) is public


def test_unresolvable_host_is_unreachable(dns: DNS, server: Server) -> None:
    # Given a host the resolver does not know
    # When it is opened
    # Then the failure is DatasetUnreachable
    with pytest.raises(DatasetUnreachable, match="resolve"):
        read_all("https://nowhere.example.com/d.csv", FetchPolicy(), server)


# --- redirects ---------------------------------------------------------------------------------------


def test_redirect_is_followed_and_the_new_host_checked(dns: DNS, server: Server) -> None:
    # Given a public host redirecting to another public host
    dns["cdn.example.net"] = [OTHER_PUBLIC_IP]
    server.route(
        "data.example.com",
        "/d.csv",
        lambda _r: httpx.Response(302, headers={"location": "https://cdn.example.net/files/d.csv"}),
    )
    server.serve("cdn.example.net", "/files/d.csv", b"moved")

    # When the original URL is read
    body = read_all("https://data.example.com/d.csv", FetchPolicy(), server)

    # Then the body comes from the target, over a connection pinned to the target's address
    assert body == b"moved"
    assert server.requests[-1].url.host == OTHER_PUBLIC_IP


def test_redirect_to_a_private_host_is_refused(dns: DNS, server: Server) -> None:
    # Given a public host redirecting to a host that resolves to a private address
    dns["internal.example.com"] = ["10.0.0.5"]
    server.route(
        "data.example.com",
        "/d.csv",
        lambda _r: httpx.Response(301, headers={"location": "https://internal.example.com/admin"}),
    )
    server.serve("internal.example.com", "/admin", b"secret")

    # When the original URL is read
    with pytest.raises(UnsafeDatasetUrl):
        read_all("https://data.example.com/d.csv", FetchPolicy(), server)

    # Then the private host was never contacted
    assert [r.headers["host"] for r in server.requests] == ["data.example.com"]


def test_redirect_to_plain_http_is_refused(dns: DNS, server: Server) -> None:
    # Given a redirect that downgrades to http
    server.route(
        "data.example.com",
        "/d.csv",
        lambda _r: httpx.Response(307, headers={"location": "http://data.example.com/d.csv"}),
    )

    # When it is read
    # Then it is refused
    with pytest.raises(UnsafeDatasetUrl):
        read_all("https://data.example.com/d.csv", FetchPolicy(), server)
    assert len(server.requests) == 1


def test_more_than_three_redirects_is_unreachable(dns: DNS, server: Server) -> None:
    # Given a chain of relative redirects /0 -> /1 -> /2 -> /3 -> /4
    for hop in range(4):
        server.route(
            "data.example.com",
            f"/{hop}",
            lambda _r, hop=hop: httpx.Response(302, headers={"location": f"/{hop + 1}"}),
        )
    server.serve("data.example.com", "/4", b"too far")

    # When the start of the chain is read
    with pytest.raises(DatasetUnreachable, match="redirected more than 3 times"):
        read_all("https://data.example.com/0", FetchPolicy(), server)

    # Then exactly the first request and three redirects were followed
    assert [r.url.path for r in server.requests] == ["/0", "/1", "/2", "/3"]


def test_three_redirects_are_followed(dns: DNS, server: Server) -> None:
    # Given a chain of exactly three redirects
    for hop in range(3):
        server.route(
            "data.example.com",
            f"/{hop}",
            lambda _r, hop=hop: httpx.Response(308, headers={"location": f"/{hop + 1}"}),
        )
    server.serve("data.example.com", "/3", b"arrived")

    # When it is read
    # Then the final body is returned
    assert read_all("https://data.example.com/0", FetchPolicy(), server) == b"arrived"


# --- status and transport failures -------------------------------------------------------------------


def test_http_404_is_unreachable_with_the_status(dns: DNS, server: Server) -> None:
    # Given a URL the server does not have
    # When it is opened
    with pytest.raises(DatasetUnreachable) as raised:
        read_all("https://data.example.com/missing.csv", FetchPolicy(), server)

    # Then the error is typed and names the status
    assert raised.value.error_type == "DatasetUnreachable"
    assert "404" in raised.value.message


def test_error_messages_strip_credentials_and_query(dns: DNS, server: Server) -> None:
    # Given a URL with userinfo and a token in the query, answered with an error page
    server.serve("data.example.com", "/d.csv", b"<html>internal detail</html>", status=500)

    # When it is opened
    with pytest.raises(DatasetUnreachable) as raised:
        read_all("https://alice:hunter2@data.example.com/d.csv?token=abc123", FetchPolicy(), server)

    # Then the message locates the dataset but carries no secret and no response body
    message = raised.value.message
    assert "https://data.example.com/d.csv" in message
    assert "500" in message
    for leaked in ("alice", "hunter2", "token", "abc123", "internal detail"):
        assert leaked not in message


@pytest.mark.parametrize(
    "failure", [httpx.ConnectTimeout("timed out"), httpx.ReadTimeout("slow"), httpx.RemoteProtocolError("x")]
)
def test_transport_failures_are_unreachable(dns: DNS, server: Server, failure: httpx.HTTPError) -> None:
    # Given a server whose connection fails
    def handler(_request: httpx.Request) -> httpx.Response:
        raise failure

    server.route("data.example.com", "/d.csv", handler)

    # When it is opened
    # Then the failure surfaces as DatasetUnreachable
    with pytest.raises(DatasetUnreachable):
        read_all("https://data.example.com/d.csv", FetchPolicy(), server)


# --- size cap ----------------------------------------------------------------------------------------


def test_oversize_content_length_is_refused_before_reading(dns: DNS, server: Server) -> None:
    # Given a response declaring more bytes than the cap
    server.serve("data.example.com", "/big.csv", b"x" * 100)
    big_url = "https://data.example.com/big.csv"

    # When it is opened with a 99-byte cap
    # Then opening itself fails, before any chunk is handed out
    with (
        pytest.raises(DatasetTooLarge, match="100 bytes"),
        open_dataset(big_url, FetchPolicy(max_bytes=99), transport=server.transport),
    ):
        pytest.fail("the stream should not have been opened")


def test_body_exactly_at_the_cap_is_accepted(dns: DNS, server: Server) -> None:
    # Given a body of exactly max_bytes
    server.serve("data.example.com", "/d.csv", b"x" * 100)

    # When it is read with a 100-byte cap
    # Then all of it arrives
    assert len(read_all("https://data.example.com/d.csv", FetchPolicy(max_bytes=100), server)) == 100


def test_streaming_past_the_cap_stops_reading(dns: DNS, server: Server) -> None:
    # Given a chunked response with no Content-Length that is far larger than the cap
    produced: list[int] = []

    def chunks() -> Iterator[bytes]:
        for index in range(1000):
            produced.append(index)
            yield b"y" * 10

    server.route("data.example.com", "/stream", lambda _r: httpx.Response(200, content=chunks()))
    stream_url = "https://data.example.com/stream"

    # When it is read with a 25-byte cap
    with (
        open_dataset(stream_url, FetchPolicy(max_bytes=25), transport=server.transport) as s,
        pytest.raises(DatasetTooLarge),
    ):
        for _chunk in s:
            pass

    # Then the fetcher stopped as soon as the running total passed the cap
    assert s.content_length is None
    assert s.bytes_read == 30
    assert len(produced) == 3


# --- s3 ----------------------------------------------------------------------------------------------


def test_s3_object_is_streamed(s3: Any) -> None:
    # Given an object in a bucket
    s3.put_object(Bucket="datasets", Key="in/d.csv", Body=b"a\n" * 50_000)

    # When it is read
    with open_dataset("s3://datasets/in/d.csv", FetchPolicy(), s3_client=s3) as stream:
        chunks = list(stream)

    # Then all bytes arrive, in more than one chunk
    assert b"".join(chunks) == b"a\n" * 50_000
    assert len(chunks) > 1
    assert stream.content_length == stream.bytes_read == 100_000


def test_s3_client_is_created_when_not_given(s3: Any) -> None:
    # Given an object and no client passed in
    s3.put_object(Bucket="datasets", Key="d.csv", Body=b"a,b\n")

    # When it is read
    with open_dataset("s3://datasets/d.csv", FetchPolicy()) as stream:
        body = b"".join(stream)

    # Then the fetcher's own client read it
    assert body == b"a,b\n"


@pytest.mark.parametrize(
    ("url", "reason"),
    [("s3://datasets/missing.csv", "does not exist"), ("s3://no-such-bucket/d.csv", "bucket does not exist")],
)
def test_missing_s3_object_or_bucket_is_unreachable(s3: Any, url: str, reason: str) -> None:
    # Given a key or bucket that does not exist
    # When it is opened
    # Then it is DatasetUnreachable, saying why
    with pytest.raises(DatasetUnreachable, match=reason), open_dataset(url, FetchPolicy(), s3_client=s3):
        pass


def test_oversize_s3_object_is_refused_before_reading(s3: Any) -> None:
    # Given an object larger than the cap
    s3.put_object(Bucket="datasets", Key="big.csv", Body=b"z" * 1000)

    # When it is opened with a smaller cap
    # Then opening fails on ContentLength
    with (
        pytest.raises(DatasetTooLarge, match="1000 bytes"),
        open_dataset("s3://datasets/big.csv", FetchPolicy(max_bytes=999), s3_client=s3),
    ):
        pytest.fail("the stream should not have been opened")


@pytest.mark.parametrize("url", ["s3://datasets", "s3://datasets/", "s3:///key"])
def test_s3_url_without_bucket_or_key_is_refused(s3: Any, url: str) -> None:
    # Given an s3 URL missing its bucket or key
    # When it is opened
    # Then it is refused as unsafe/invalid
    with pytest.raises(UnsafeDatasetUrl), open_dataset(url, FetchPolicy(), s3_client=s3):
        pass


# --- cost per fetch ----------------------------------------------------------------------------------


class _LoopbackCsv(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("content-length", "4")
        self.end_headers()
        self.wfile.write(b"a\n1\n")

    def log_message(self, *args: Any) -> None:
        pass


def test_fetches_share_one_tls_context_instead_of_loading_the_ca_bundle_each_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a plain-http dataset server on loopback (the local stack's policy) and a count of the TLS
    # contexts built: each one loads the CA bundle, tens of ms of CPU that a batch's records, each on its
    # own thread, would otherwise pay one after another under the GIL
    built: list[ssl.SSLContext] = []
    create_default_context = ssl.create_default_context

    def counting(*args: Any, **kwargs: Any) -> ssl.SSLContext:
        built.append(create_default_context(*args, **kwargs))
        return built[-1]

    monkeypatch.setattr(ssl, "create_default_context", counting)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _LoopbackCsv)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/d.csv"
    try:
        # When three datasets are fetched with the real network transport
        bodies = []
        for _ in range(3):
            with open_dataset(url, FetchPolicy(allow_loopback_hosts=True)) as stream:
                bodies.append(b"".join(stream))
    finally:
        server.shutdown()
    # Then each was read, and at most one TLS context was built for the three
    assert bodies == [b"a\n1\n"] * 3
    assert len(built) <= 1


def gzip_bomb(decompressed_bytes: int) -> bytes:
    return gzip.compress(b"0" * decompressed_bytes, compresslevel=9)


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "br", "x-gzip, identity"])
def test_a_compressed_response_is_refused_before_it_is_decoded(dns: DNS, server: Server, encoding: str) -> None:
    # Given a host answering (although asked for identity) with a small compressed body that inflates past the cap
    bomb = gzip_bomb(10 * 1024 * 1024)
    server.route(
        "data.example.com",
        "/d.csv",
        lambda _request: httpx.Response(200, stream=httpx.ByteStream(bomb), headers={"content-encoding": encoding}),
    )

    # When it is read with a 1 MiB cap
    # Then it is refused as compressed, naming the encoding, and nothing was inflated
    with pytest.raises(DatasetCompressed, match="Content-Encoding"):
        read_all("https://data.example.com/d.csv", FetchPolicy(max_bytes=1024 * 1024), server)
    assert server.requests[0].headers["accept-encoding"] == "identity"


def test_an_identity_encoded_response_is_read_as_sent(dns: DNS, server: Server) -> None:
    server.route(
        "data.example.com",
        "/d.csv",
        lambda _request: httpx.Response(200, content=b"a,b\n1,2\n", headers={"content-encoding": "identity"}),
    )
    assert read_all("https://data.example.com/d.csv", FetchPolicy(), server) == b"a,b\n1,2\n"
