"""https:// (and, on the local stack only, http://) datasets: streamed, size-capped, every hop's
host checked, and the connection pinned to the address that was checked."""

from __future__ import annotations

import functools
import ssl
from collections.abc import Iterator
from contextlib import contextmanager

import httpx

from mcp_backend.netsafety import (
    HostNotResolved,
    IPAddress,
    MalformedUrl,
    PrivateAddress,
    allowed_schemes,
    public_addresses,
    redact_url,
    split_url,
)
from mcp_backend.tools.dataset_stream import DatasetStream, FetchPolicy
from mcp_backend.tools.errors import (
    DatasetCompressed,
    DatasetTemporarilyUnreachable,
    DatasetTooLarge,
    DatasetUnreachable,
    UnsafeDatasetUrl,
)

MAX_REDIRECTS = 3
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
# Request Timeout and Too Many Requests are the 4xx answers that may change on a retry (as 5xx may).
RETRYABLE_STATUSES = frozenset({408, 429})


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """httpx's own default verification (its CA bundle; trust_env=False as below), built once per process:
    building it loads the bundle, about 50 ms of CPU that each fetch would pay again, one record's thread
    after another under the GIL. An SSLContext is safe to share between threads once configured."""
    return httpx.create_ssl_context(trust_env=False)


@contextmanager
def open_http(url: str, policy: FetchPolicy, transport: httpx.BaseTransport | None) -> Iterator[DatasetStream]:
    _check_syntax(url)
    try:
        target = httpx.URL(url)
    except httpx.InvalidURL:
        raise UnsafeDatasetUrl(f"Dataset URL {redact_url(url)} is not a valid URL") from None
    # trust_env=False: no proxy (it would bypass the address check) and no ~/.netrc credentials.
    with httpx.Client(
        transport=transport,
        verify=_tls_context(),
        timeout=httpx.Timeout(policy.timeout_seconds),
        follow_redirects=False,
        trust_env=False,
    ) as client:
        target, response = _get_following_redirects(client, target, policy)
        try:
            shown = redact_url(str(target))
            if not response.is_success:
                status_error = (
                    DatasetTemporarilyUnreachable
                    if response.status_code in RETRYABLE_STATUSES or response.status_code >= 500
                    else DatasetUnreachable
                )
                raise status_error(f"Dataset {shown} returned HTTP {response.status_code}")
            encoding = response.headers.get("content-encoding", "identity").strip().lower()
            if encoding != "identity":
                # Asked for identity; a compressed body could inflate far past the cap before it is counted.
                raise DatasetCompressed(
                    f"Dataset {shown} answered with Content-Encoding {encoding[:40]!r}; only identity is accepted"
                )
            content_length = parse_content_length(response.headers.get("content-length"))
            if content_length is not None and content_length > policy.max_bytes:
                raise DatasetTooLarge(
                    f"Dataset {shown} is {content_length} bytes, over the {policy.max_bytes}-byte limit"
                )
            yield DatasetStream(
                shown,
                _http_chunks(response, shown),
                content_length=content_length,
                policy=policy,
            )
        finally:
            response.close()


def _get_following_redirects(
    client: httpx.Client, target: httpx.URL, policy: FetchPolicy
) -> tuple[httpx.URL, httpx.Response]:
    """GET `target`, following at most MAX_REDIRECTS redirects, each hop's host checked afresh."""
    for hop in range(MAX_REDIRECTS + 1):
        response = _send_checked(client, target, policy)
        if response.status_code not in REDIRECT_STATUSES:
            return target, response
        location = response.headers.get("location")
        response.close()
        shown = redact_url(str(target))
        if not location:
            raise DatasetUnreachable(f"Dataset {shown} redirected without a Location header")
        if hop == MAX_REDIRECTS:
            raise DatasetUnreachable(f"Dataset {shown} redirected more than {MAX_REDIRECTS} times")
        try:
            target = target.join(location)
            split_url(str(target))
        except (httpx.InvalidURL, MalformedUrl):
            raise DatasetUnreachable(f"Dataset {shown} redirected to an invalid URL") from None
    raise AssertionError("unreachable")  # the loop always returns or raises


def _send_checked(client: httpx.Client, target: httpx.URL, policy: FetchPolicy) -> httpx.Response:
    shown = redact_url(str(target))
    if target.scheme not in allowed_schemes(allow_loopback_hosts=policy.allow_loopback_hosts):
        raise UnsafeDatasetUrl(f"Dataset URL {shown} must use https://")
    host = target.raw_host.decode("ascii")  # IDNA-encoded, as DNS needs it
    if not host:
        raise UnsafeDatasetUrl(f"Dataset URL {shown} has no host")
    # Connection: close so no pooled connection (TLS-verified for another hop's host) is reused.
    headers = {"Accept-Encoding": "identity", "Connection": "close"}
    port = target.port or (443 if target.scheme == "https" else 80)
    addresses = _public_addresses(host, port, shown, allow_loopback=policy.allow_loopback_hosts)
    headers["Host"] = target.netloc.decode("ascii")
    last_error: httpx.ConnectError | None = None
    for address in addresses:
        # Connect to the address that was checked; TLS still verifies the certificate for `host`.
        request = client.build_request(
            "GET", target.copy_with(host=str(address)), headers=headers, extensions={"sni_hostname": host}
        )
        try:
            return client.send(request, stream=True)
        except httpx.ConnectError as exc:
            last_error = exc  # refused or unroutable (e.g. IPv6): try the next checked address
        except httpx.HTTPError as exc:
            raise _unreachable(shown, exc) from exc
    assert last_error is not None  # public_addresses never returns an empty list
    raise _unreachable(shown, last_error) from last_error


def _check_syntax(url: str) -> None:
    try:
        split_url(url)
    except MalformedUrl as error:
        raise UnsafeDatasetUrl(f"Dataset URL {redact_url(url)}: {error}") from None


def _public_addresses(host: str, port: int, shown: str, *, allow_loopback: bool) -> list[IPAddress]:
    try:
        return public_addresses(host, port, allow_loopback=allow_loopback)
    except HostNotResolved:
        raise DatasetUnreachable(f"Could not resolve the host of dataset {shown}") from None
    except PrivateAddress:
        raise UnsafeDatasetUrl(f"Dataset URL {shown} resolves to a private or reserved address") from None


def parse_content_length(value: str | None) -> int | None:
    if value is None or not value.strip().isdigit():
        return None
    return int(value)


def _http_chunks(response: httpx.Response, shown: str) -> Iterator[bytes]:
    try:
        # No chunk_size: yield as bytes arrive, so the cap is checked per network read. The encoding was
        # checked to be identity, so these are the bytes that came over the wire, nothing inflated.
        yield from response.iter_bytes()
    except httpx.HTTPError as exc:
        raise _unreachable(shown, exc) from exc


def _unreachable(shown: str, exc: httpx.HTTPError) -> DatasetUnreachable:
    # The exception's class name is diagnostic enough; its text can echo the URL.
    if isinstance(exc, httpx.TimeoutException):
        return DatasetTemporarilyUnreachable(f"Fetching dataset {shown} timed out")
    if isinstance(exc, httpx.ConnectError):
        # Refused or unroutable on every checked address: nothing listens there.
        return DatasetUnreachable(f"Fetching dataset {shown} failed ({type(exc).__name__})")
    # A connection dropped mid-request or mid-body (ReadError, RemoteProtocolError): may work next time.
    return DatasetTemporarilyUnreachable(f"Fetching dataset {shown} failed ({type(exc).__name__})")
