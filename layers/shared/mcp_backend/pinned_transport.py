"""An HTTP transport pinned to the addresses a caller checked (probes, and the authorization server's client
metadata documents; loaded on first use, not at a cold start): it connects to those, never to a second DNS answer,
so a name that rebinds between check and connect cannot steer the request, and a token it carries, at another
host. A subclass names the errors it raises (the probes' own, whose names their envelopes carry).

Everything sent through one transport shares one total deadline (netsafety.OutboundDeadline): connect, TLS,
response headers and bodies of every request draw from the time left, and at zero the request is cancelled,
which closes its connection (httpx2.TimeoutException naming the deadline)."""

from __future__ import annotations

import functools
import ssl
import zlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import httpx2

from mcp_backend.netsafety import IPAddress, OutboundDeadline

# zlib's window bits per content coding: gzip's header, or zlib's (RFC 9110 "deflate").
_WINDOW_BITS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}
# At most this much decoded output per zlib call, so a small compressed chunk never inflates all at once.
_INFLATE_STEP = 64 * 1024


class UnreadableAnswer(Exception):
    """An answer in a content coding the transport does not decode, or not valid compressed data."""


class AnswerTooLarge(Exception):
    """An answer longer, decoded, than the transport reads."""


class PinnedTransport(httpx2.AsyncBaseTransport):
    """An httpx2 async transport that sends requests for the endpoint's origin to its checked addresses,
    in order (the next on a refused connection, as the dataset fetcher does), and refuses any other origin.

    The request keeps its URL's name in the Host header, and the name is the TLS server name (httpcore's
    `sni_hostname` extension), so the certificate is verified for the name, not for the address.

    The deadline starts with the first request: `deadline_seconds`, or else the client's own timeout (its
    longest phase), which so bounds everything the client sends through this transport in total."""

    unreadable: type[Exception] = UnreadableAnswer
    too_large: type[Exception] = AnswerTooLarge

    def __init__(
        self,
        url: str,
        addresses: tuple[IPAddress, ...],
        inner: httpx2.AsyncBaseTransport | None = None,
        max_response_bytes: int | None = None,
        deadline_seconds: float | None = None,
    ) -> None:
        self.origin = _origin(httpx2.URL(url))
        self.addresses = addresses
        self.inner = inner if inner is not None else httpx2.AsyncHTTPTransport(verify=_tls_context())
        self.max_response_bytes = max_response_bytes
        self.deadline_seconds = deadline_seconds
        self.deadline: OutboundDeadline | None = None

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if _origin(request.url) != self.origin or not self.addresses:
            raise httpx2.ConnectError("not the registered endpoint's origin", request=request)
        deadline = self._deadline(request)
        if deadline is None:
            return await self._send(request)
        try:
            with anyio.fail_after(deadline.timeout()):
                response = await self._send(request)
        except TimeoutError:  # DeadlinePassed too: no time was left
            raise httpx2.TimeoutException(deadline.message, request=request) from None
        response.stream = DeadlineStream(response.stream, deadline, request)
        return response

    def _deadline(self, request: httpx2.Request) -> OutboundDeadline | None:
        if self.deadline is None:
            phases = [t for t in request.extensions.get("timeout", {}).values() if t is not None]
            seconds = self.deadline_seconds if self.deadline_seconds is not None else max(phases, default=None)
            self.deadline = OutboundDeadline(seconds) if seconds is not None else None
        return self.deadline

    async def _send(self, request: httpx2.Request) -> httpx2.Response:
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
                response = await self.inner.handle_async_request(pinned)
            except httpx2.ConnectError as error:
                last_error = error  # refused or unroutable: try the next checked address
                continue
            if self.max_response_bytes is not None:
                encoding = response.headers.pop("content-encoding", "identity").strip().lower()
                try:
                    inflater = _inflater(encoding, self.unreadable)
                except self.unreadable:
                    await response.aclose()
                    raise
                response.stream = CappedStream(
                    response.stream,
                    self.max_response_bytes,
                    request.url.host,
                    inflater,
                    self.too_large,
                    self.unreadable,
                )
            return response
        assert last_error is not None
        raise last_error

    async def aclose(self) -> None:
        await self.inner.aclose()


class DeadlineStream(httpx2.AsyncByteStream):
    """A response body read under the transport's deadline: each read gets the time left, no more; at zero the
    read is cancelled, which closes the connection."""

    def __init__(self, inner: Any, deadline: OutboundDeadline, request: httpx2.Request) -> None:
        self.inner = inner
        self.deadline = deadline
        self.request = request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        chunks = aiter(self.inner)
        while True:
            try:
                with anyio.fail_after(self.deadline.timeout()):
                    chunk = await anext(chunks)
            except StopAsyncIteration:
                return
            except TimeoutError:
                raise httpx2.TimeoutException(self.deadline.message, request=self.request) from None
            yield chunk

    async def aclose(self) -> None:
        await self.inner.aclose()


class CappedStream(httpx2.AsyncByteStream):
    """A response body decoded here (its content coding taken off the response, so the client decodes nothing
    more) and counted in decoded bytes, at most `limit`; one more is `too_large`, so an endpoint
    cannot make the probe hold an unbounded answer, however well it compresses (a 204 KB gzip of 200 MiB stops
    at the cap). Each zlib call yields at most _INFLATE_STEP bytes, so the check runs before the next step."""

    def __init__(
        self,
        inner: Any,
        limit: int,
        host: str,
        inflater: Any = None,
        too_large: type[Exception] = AnswerTooLarge,
        unreadable: type[Exception] = UnreadableAnswer,
    ) -> None:
        self.inner = inner
        self.limit = limit
        self.host = host
        self.inflater = inflater
        self.too_large = too_large
        self.unreadable = unreadable

    async def __aiter__(self) -> AsyncIterator[bytes]:
        decoded = 0
        async for chunk in self.inner:
            for piece in _inflate(self.inflater, chunk, self.unreadable) if self.inflater is not None else (chunk,):
                decoded += len(piece)
                if decoded > self.limit:
                    raise self.too_large(f"an answer of {self.host} exceeded {self.limit} bytes")
                yield piece

    async def aclose(self) -> None:
        await self.inner.aclose()


def _inflater(encoding: str, unreadable: type[Exception]) -> Any:
    """A zlib decompressor for the response's content coding, or None for identity. The probe asks for identity;
    an endpoint that compresses anyway gets gzip and deflate decoded under the cap, anything else refused."""
    if encoding in ("", "identity"):
        return None
    if encoding not in _WINDOW_BITS:
        raise unreadable(f"an answer came in a content coding the probe does not decode ({encoding[:40]})")
    return zlib.decompressobj(_WINDOW_BITS[encoding])


def _inflate(inflater: Any, chunk: bytes, unreadable: type[Exception]) -> Iterator[bytes]:
    """The chunk's decoded bytes, in steps of at most _INFLATE_STEP (the caller counts them between steps)."""
    try:
        while True:
            piece = inflater.decompress(chunk, _INFLATE_STEP)
            if piece:
                yield piece
            chunk = inflater.unconsumed_tail
            if not chunk and len(piece) < _INFLATE_STEP:
                return
    except zlib.error:
        raise unreadable("an answer is not valid compressed data") from None


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """What `AsyncHTTPTransport()` builds by default, built once per process instead of once per probe (it
    loads the CA bundle: tens of ms of CPU each time)."""
    return httpx2.create_ssl_context()


def _origin(url: httpx2.URL) -> tuple[str, str, int]:
    return url.scheme, url.host, url.port or (443 if url.scheme == "https" else 80)
