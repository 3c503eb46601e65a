"""https:// (and, on the local stack only, http://) datasets: streamed, size-capped, every hop's
host checked, and the connection pinned to the address that was checked.

One deadline bounds the whole fetch (netsafety.OutboundDeadline): connect, TLS, response headers, every
redirect hop and the body draw from the time left, and at zero the connection is closed. Past a synchronous
call's deadline the fetch ends as CallDeadlineExceeded; past the fetch's own (FetchPolicy.fetch_deadline_seconds)
it ends as DatasetTemporarilyUnreachable."""

from __future__ import annotations

import functools
import ssl
from collections.abc import Iterator
from contextlib import contextmanager

import httpx

from mcp_backend.netsafety import (
    DeadlinePassed,
    HostNotResolved,
    IPAddress,
    MalformedUrl,
    OutboundDeadline,
    PrivateAddress,
    allowed_schemes,
    public_addresses,
    redact_url,
    split_url,
)
from mcp_backend.tools.dataset_stream import DatasetStream, FetchPolicy, call_deadline_exceeded
from mcp_backend.tools.errors import (
    DatasetCompressed,
    DatasetTemporarilyUnreachable,
    DatasetTooLarge,
    DatasetUnreachable,
    ToolError,
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
    with (
        fetch_deadline(policy) as deadline,
        httpx.Client(transport=transport, verify=_tls_context(), follow_redirects=False, trust_env=False) as client,
    ):
        target, response = _get_following_redirects(client, target, policy, deadline)
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
                _http_chunks(response, shown, policy, deadline),
                content_length=content_length,
                policy=policy,
            )
        finally:
            response.close()


def fetch_deadline(policy: FetchPolicy) -> OutboundDeadline:
    """The fetch's deadline: its own (fetch_deadline_seconds from now), or the call's if that ends sooner."""
    own = OutboundDeadline(policy.fetch_deadline_seconds)
    if policy.deadline is not None and policy.deadline < own.end:
        return OutboundDeadline(policy.deadline_seconds, end=policy.deadline)
    return own


def _get_following_redirects(
    client: httpx.Client, target: httpx.URL, policy: FetchPolicy, deadline: OutboundDeadline
) -> tuple[httpx.URL, httpx.Response]:
    """GET `target`, following at most MAX_REDIRECTS redirects, each hop's host checked afresh; all hops
    share the one deadline."""
    for hop in range(MAX_REDIRECTS + 1):
        response = _send_checked(client, target, policy, deadline)
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


def _send_checked(
    client: httpx.Client, target: httpx.URL, policy: FetchPolicy, deadline: OutboundDeadline
) -> httpx.Response:
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
        try:
            # Each phase's timeout is the time left, at most the per-operation one.
            timeout = deadline.timeout(policy.timeout_seconds)
        except DeadlinePassed:
            raise _deadline_error(policy, deadline, shown) from None
        # Connect to the address that was checked; TLS still verifies the certificate for `host`.
        request = client.build_request(
            "GET",
            target.copy_with(host=str(address)),
            headers=headers,
            timeout=timeout,
            extensions={"sni_hostname": host, **deadline.request_extensions()},
        )
        try:
            return client.send(request, stream=True)
        except httpx.HTTPError as exc:
            if deadline.expired:
                raise _deadline_error(policy, deadline, shown) from None
            if not isinstance(exc, httpx.ConnectError):
                raise _unreachable(shown, exc) from exc
            last_error = exc  # refused or unroutable (e.g. IPv6): try the next checked address
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


def _http_chunks(
    response: httpx.Response, shown: str, policy: FetchPolicy, deadline: OutboundDeadline
) -> Iterator[bytes]:
    try:
        # No chunk_size: yield as bytes arrive, so the cap is checked per network read. The encoding was
        # checked to be identity, so these are the bytes that came over the wire, nothing inflated.
        yield from response.iter_bytes()
    except httpx.HTTPError as exc:
        if deadline.expired:
            raise _deadline_error(policy, deadline, shown) from None
        raise _unreachable(shown, exc) from exc
    if deadline.cut:
        # A body without a length ends when the connection does: the one the watchdog shut is truncated.
        raise _deadline_error(policy, deadline, shown)


def _deadline_error(policy: FetchPolicy, deadline: OutboundDeadline, shown: str) -> ToolError:
    """The synchronous call's deadline (a tool error naming it), or the fetch's own (the source may be quicker
    on a retry)."""
    if policy.deadline is not None and deadline.end >= policy.deadline:
        return call_deadline_exceeded(policy)
    return DatasetTemporarilyUnreachable(f"Fetching dataset {shown} passed its {deadline.seconds:g} s deadline")


def _unreachable(shown: str, exc: httpx.HTTPError) -> DatasetUnreachable:
    # The exception's class name is diagnostic enough; its text can echo the URL.
    if isinstance(exc, httpx.TimeoutException):
        return DatasetTemporarilyUnreachable(f"Fetching dataset {shown} timed out")
    if isinstance(exc, httpx.ConnectError):
        # Refused or unroutable on every checked address: nothing listens there.
        return DatasetUnreachable(f"Fetching dataset {shown} failed ({type(exc).__name__})")
    # A connection dropped mid-request or mid-body (ReadError, RemoteProtocolError): may work next time.
    return DatasetTemporarilyUnreachable(f"Fetching dataset {shown} failed ({type(exc).__name__})")
