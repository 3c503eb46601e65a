"""Safe streaming fetch of user-supplied dataset URLs (https, s3; plain http only on the local stack).

The URL comes from a tool caller, so every HTTP hop is treated as an SSRF attempt until proven
otherwise: the host is resolved here, every address must be public, and the connection is pinned to
the checked address so a second DNS answer (rebinding) cannot redirect it. Bytes are streamed and
counted; nothing here holds more than one chunk.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from mcp_backend.tools.errors import DatasetTooLarge, DatasetUnreachable, UnsafeDatasetUrl, redact_url

if TYPE_CHECKING:
    import httpx

MAX_REDIRECTS = 3
S3_CHUNK_SIZE = 64 * 1024
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
_NAT64_PREFIX = ipaddress.IPv6Network("64:ff9b::/96")
_S3_MISSING_CODES = {
    "NoSuchKey": "the object does not exist",
    "NoSuchBucket": "the bucket does not exist",
    "AccessDenied": "access denied",
}

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class S3Client(Protocol):
    """The one boto3 S3 client method used here."""

    def get_object(self, *, Bucket: str, Key: str) -> Mapping[str, Any]: ...


@dataclass(frozen=True)
class FetchPolicy:
    max_bytes: int = 50 * 1024 * 1024
    # Per network operation (connect, each read); the function's own timeout bounds the total.
    timeout_seconds: float = 10.0
    # Only the local dev stack sets this: it permits loopback/private hosts and plain http://.
    allow_private_hosts: bool = False


class DatasetStream:
    """The dataset's bytes as an iterator of chunks, enforcing the byte cap as they arrive."""

    def __init__(self, url: str, chunks: Iterator[bytes], *, content_length: int | None, max_bytes: int) -> None:
        self.url = url  # redacted: safe to report
        self.content_length = content_length
        self._chunks = chunks
        self._max_bytes = max_bytes
        self._bytes_read = 0

    @property
    def bytes_read(self) -> int:
        return self._bytes_read

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self._chunks:
            self._bytes_read += len(chunk)
            if self._bytes_read > self._max_bytes:
                raise DatasetTooLarge(f"Dataset {self.url} is larger than the {self._max_bytes}-byte limit")
            if chunk:
                yield chunk


@contextmanager
def open_dataset(
    url: str,
    policy: FetchPolicy,
    *,
    s3_client: S3Client | None = None,
    transport: httpx.BaseTransport | None = None,
) -> Iterator[DatasetStream]:
    """Open `url` for streaming; the connection is released when the block exits.

    `transport` replaces httpx's network transport (tests). Raises UnsafeDatasetUrl, DatasetUnreachable
    or DatasetTooLarge, before yielding or while the stream is iterated.
    """
    scheme = url.partition(":")[0].lower()
    if scheme == "s3":
        with _open_s3(url, policy, s3_client) as stream:
            yield stream
    elif scheme in allowed_http_schemes(policy):
        # httpx loads only when a job fetches over https: it is a tenth of a cold start.
        from mcp_backend.tools.http_source import open_http

        with open_http(url, policy, transport) as stream:
            yield stream
    else:
        raise UnsafeDatasetUrl(f"Dataset URL {redact_url(url)} must use https:// or s3://")


def split_s3_url(url: str) -> tuple[str, str] | None:
    """(bucket, key) of an s3://bucket/key URL, or None. The key is kept verbatim: '?' and '#' are legal."""
    scheme, sep, rest = url.partition("://")
    if scheme.lower() != "s3" or not sep:
        return None
    bucket, _, key = rest.partition("/")
    if not bucket or not key or any(c in bucket for c in "@:?#"):
        return None
    return bucket, key


def allowed_http_schemes(policy: FetchPolicy) -> frozenset[str]:
    return frozenset({"https", "http"}) if policy.allow_private_hosts else frozenset({"https"})


def parse_content_length(value: str | None) -> int | None:
    if value is None or not value.strip().isdigit():
        return None
    return int(value)


# --- address checks ----------------------------------------------------------------------------------


def public_addresses(host: str, port: int, shown: str) -> list[IPAddress]:
    """Every address `host` resolves to, in resolver order; refuses if any one is not public.

    Checking all (not just the first) matters: the client may connect to any of them.
    """
    try:
        addresses: list[IPAddress] = [ipaddress.ip_address(host)]
    except ValueError:
        addresses = _resolve(host, port, shown)
    if any(not is_public_address(address) for address in addresses):
        # The address itself is not echoed: it would map the private network for the caller.
        raise UnsafeDatasetUrl(f"Dataset URL {shown} resolves to a private or reserved address")
    return addresses


def _resolve(host: str, port: int, shown: str) -> list[IPAddress]:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        raise DatasetUnreachable(f"Could not resolve the host of dataset {shown}") from None
    addresses: list[IPAddress] = []
    for info in infos:
        # IPv6 sockaddrs may carry a "%scope" suffix.
        address = ipaddress.ip_address(str(info[4][0]).partition("%")[0])
        if address not in addresses:
            addresses.append(address)
    if not addresses:
        raise DatasetUnreachable(f"Could not resolve the host of dataset {shown}")
    return addresses


def is_public_address(address: IPAddress) -> bool:
    """True for a globally routable unicast address, judging IPv4 embedded in IPv6 by its IPv4 part."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return is_public_address(address.ipv4_mapped)
        if address in _NAT64_PREFIX:
            return is_public_address(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    return not (
        address.is_loopback
        or address.is_link_local  # includes 169.254.169.254 (instance metadata)
        or address.is_private
        or address.is_reserved
        or address.is_multicast
        or address.is_unspecified
        or not address.is_global  # e.g. 100.64.0.0/10 shared address space
    )


# --- s3 ----------------------------------------------------------------------------------------------


@contextmanager
def _open_s3(url: str, policy: FetchPolicy, s3_client: S3Client | None) -> Iterator[DatasetStream]:
    from botocore.exceptions import BotoCoreError, ClientError  # boto3 is in the runtime, not the layer

    shown = redact_url(url)
    parts = split_s3_url(url)
    if parts is None:
        raise UnsafeDatasetUrl(f"Dataset URL {shown} must look like s3://bucket/key")
    bucket, key = parts
    client = s3_client if s3_client is not None else _default_s3_client(policy)
    try:
        obj = client.get_object(Bucket=bucket, Key=key)
    except ClientError as exc:
        code = str(exc.response.get("Error", {}).get("Code", "Unknown"))
        reason = _S3_MISSING_CODES.get(code, f"S3 error {code}")
        raise DatasetUnreachable(f"Could not read dataset {shown}: {reason}") from exc
    except BotoCoreError as exc:
        raise DatasetUnreachable(f"Could not read dataset {shown}: {type(exc).__name__}") from exc
    body = obj["Body"]
    try:
        content_length = obj.get("ContentLength")
        if content_length is not None and content_length > policy.max_bytes:
            raise DatasetTooLarge(f"Dataset {shown} is {content_length} bytes, over the {policy.max_bytes}-byte limit")
        yield DatasetStream(shown, _s3_chunks(body, shown), content_length=content_length, max_bytes=policy.max_bytes)
    finally:
        body.close()


def _s3_chunks(body: Any, shown: str) -> Iterator[bytes]:
    from botocore.exceptions import BotoCoreError

    try:
        yield from body.iter_chunks(S3_CHUNK_SIZE)
    except (BotoCoreError, OSError) as exc:
        raise DatasetUnreachable(f"Reading dataset {shown} failed ({type(exc).__name__})") from exc


def _default_s3_client(policy: FetchPolicy) -> S3Client:
    import boto3
    from botocore.config import Config

    config = Config(connect_timeout=policy.timeout_seconds, read_timeout=policy.timeout_seconds)
    return boto3.client("s3", config=config)
