"""The probe's HTTP transport, pinned to the addresses the worker checked (loaded with the MCP client, not
at a cold start): the probe connects to those, never to a second DNS answer, so a name that rebinds
between check and connect cannot steer the probe, and the endpoint's token, at another host."""

from __future__ import annotations

import functools
import ssl

import httpx2

from mcp_backend.netsafety import IPAddress


class PinnedTransport(httpx2.AsyncBaseTransport):
    """An httpx2 async transport that sends requests for the endpoint's origin to its checked addresses,
    in order (the next on a refused connection, as the dataset fetcher does), and refuses any other origin.

    The request keeps its URL's name in the Host header, and the name is the TLS server name (httpcore's
    `sni_hostname` extension), so the certificate is verified for the name, not for the address."""

    def __init__(
        self, url: str, addresses: tuple[IPAddress, ...], inner: httpx2.AsyncBaseTransport | None = None
    ) -> None:
        self.origin = _origin(httpx2.URL(url))
        self.addresses = addresses
        self.inner = inner if inner is not None else httpx2.AsyncHTTPTransport(verify=_tls_context())

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if _origin(request.url) != self.origin or not self.addresses:
            raise httpx2.ConnectError("not the registered endpoint's origin", request=request)
        last_error: httpx2.ConnectError | None = None
        for address in self.addresses:
            pinned = httpx2.Request(
                request.method,
                request.url.copy_with(host=str(address)),
                headers=request.headers,  # Host: the registered name
                stream=request.stream,
                extensions={**request.extensions, "sni_hostname": request.url.host},
            )
            try:
                return await self.inner.handle_async_request(pinned)
            except httpx2.ConnectError as error:
                last_error = error  # refused or unroutable: try the next checked address
        assert last_error is not None
        raise last_error

    async def aclose(self) -> None:
        await self.inner.aclose()


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """What `AsyncHTTPTransport()` builds by default, built once per process instead of once per probe (it
    loads the CA bundle: tens of ms of CPU each time)."""
    return httpx2.create_ssl_context()


def _origin(url: httpx2.URL) -> tuple[str, str, int]:
    return url.scheme, url.host, url.port or (443 if url.scheme == "https" else 80)
