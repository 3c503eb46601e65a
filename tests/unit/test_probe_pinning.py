"""The probe's pinned transport: requests go to the checked addresses, TLS still names the registered host."""

from __future__ import annotations

import ipaddress

import anyio
import httpx2
import pytest

import mcp_backend.authorization.clients
from mcp_backend.authorization.clients import MetadataDocuments
from mcp_backend.probes.pinning import PinnedTransport
from tests.loopback_http import trickling

CHECKED = (ipaddress.ip_address("93.184.216.34"), ipaddress.ip_address("2606:2800:220:1:248:1893:25c8:1946"))
LOOPBACK = (ipaddress.ip_address("127.0.0.1"),)
HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 64\r\n\r\n"


class Recording(httpx2.AsyncBaseTransport):
    """Stands in for the network: records each request, refuses connections to `refused` hosts."""

    def __init__(self, refused: frozenset[str] = frozenset()) -> None:
        self.requests: list[httpx2.Request] = []
        self.refused = refused

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        self.requests.append(request)
        if request.url.host in self.refused:
            raise httpx2.ConnectError("refused", request=request)
        return httpx2.Response(200, content=b"{}")


def send(transport: PinnedTransport, url: str) -> httpx2.Response:
    async def go() -> httpx2.Response:
        async with httpx2.AsyncClient(transport=transport, trust_env=False) as client:
            return await client.post(url, json={})

    return anyio.run(go)


def test_a_request_goes_to_the_checked_address_with_the_name_for_host_header_and_tls():
    # Given a transport pinned to the addresses checked for mcp.example.com
    network = Recording()
    transport = PinnedTransport("https://mcp.example.com/mcp", CHECKED, inner=network)

    # When the MCP client posts to the endpoint
    send(transport, "https://mcp.example.com/mcp")

    # Then the connection is to the first checked address, while Host and the TLS server name stay the name
    (request,) = network.requests
    assert (request.url.scheme, request.url.host, request.url.path) == ("https", "93.184.216.34", "/mcp")
    assert request.headers["host"] == "mcp.example.com"
    assert request.extensions["sni_hostname"] == "mcp.example.com"


def test_a_refused_address_falls_back_to_the_next_checked_one():
    network = Recording(refused=frozenset({"93.184.216.34"}))
    transport = PinnedTransport("https://mcp.example.com/mcp", CHECKED, inner=network)

    send(transport, "https://mcp.example.com/mcp")

    assert [r.url.host for r in network.requests] == ["93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946"]


@pytest.mark.parametrize(
    "url", ["https://elsewhere.example.com/mcp", "http://mcp.example.com/mcp", "https://mcp.example.com:8443/mcp"]
)
def test_a_request_for_another_origin_is_refused_without_a_connection(url):
    # Given a transport pinned to mcp.example.com's checked addresses
    network = Recording()
    transport = PinnedTransport("https://mcp.example.com/mcp", CHECKED, inner=network)

    # When / Then: a request for another host, scheme or port (a redirect, say) never leaves
    with pytest.raises(httpx2.ConnectError):
        send(transport, url)
    assert network.requests == []


def fetch(transport: PinnedTransport, url: str, timeout: float = 10.0) -> httpx2.Response:
    """A GET as the client metadata documents make it: the client's own timeout, the body read in full."""

    async def go() -> httpx2.Response:
        async with httpx2.AsyncClient(transport=transport, timeout=timeout, trust_env=False) as client:
            return await client.get(url)

    return anyio.run(go)


def test_the_clients_timeout_bounds_a_trickled_answer_in_total():
    # Given a server that sends its response headers one byte at a time, each byte well within the read timeout
    with trickling(HEAD + b"{}".ljust(64)) as (url, closed_early):
        transport = PinnedTransport(url, LOOPBACK)

        # When a client with a 0.5 s timeout (and no other deadline) fetches through the pinned transport
        # Then the timeout bounds the whole exchange: it fails naming the deadline, and the connection was closed
        with pytest.raises(httpx2.TimeoutException, match=r"0\.5 s deadline"):
            fetch(transport, f"{url}/client.json", timeout=0.5)
        assert closed_early.wait(10)


def test_a_trickled_body_is_cut_at_the_transports_deadline():
    # Given a server that sends its headers at once, then its body one byte at a time
    with trickling(b"{}".ljust(64), head=HEAD) as (url, closed_early):
        transport = PinnedTransport(url, LOOPBACK, deadline_seconds=0.5)

        # When it is fetched under a 0.5 s deadline, the client's own timeout far longer
        # Then the body read ends at the deadline, and the server saw the connection closed before it was done
        with pytest.raises(httpx2.TimeoutException, match=r"0\.5 s deadline"):
            fetch(transport, f"{url}/client.json")
        assert closed_early.wait(10)


def test_a_client_metadata_document_that_trickles_is_refused_at_the_fetchs_deadline(monkeypatch):
    # Given a client_id URL whose server sends its answer one byte at a time, and a 0.5 s document fetch timeout
    monkeypatch.setattr(mcp_backend.authorization.clients, "FETCH_TIMEOUT_SECONDS", 0.5)
    with trickling(HEAD + b"{}".ljust(64)) as (url, closed_early):
        documents = MetadataDocuments((), allow_loopback_hosts=True)

        # When the authorization server looks the client up
        found = anyio.run(documents.client, f"{url}/client.json")

        # Then the timeout bounded the whole fetch: no client, and the server saw the connection closed early
        assert found is None
        assert closed_early.wait(10)
