"""The probe's pinned transport: requests go to the checked addresses, TLS still names the registered host."""

from __future__ import annotations

import ipaddress

import anyio
import httpx2
import pytest

from mcp_backend.probes.pinning import PinnedTransport

CHECKED = (ipaddress.ip_address("93.184.216.34"), ipaddress.ip_address("2606:2800:220:1:248:1893:25c8:1946"))


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
