"""Safe streaming fetch of user-supplied dataset URLs (https, s3; plain http only on the local stack).

The URL comes from a tool caller, so every HTTP hop is treated as an SSRF attempt until proven
otherwise: the host is resolved here, every address must be public, and the connection is pinned to
the checked address so a second DNS answer (rebinding) cannot redirect it. Bytes are streamed and
counted; nothing here holds more than one chunk.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Protocol

from mcp_backend.aws import botocore_errors, new_client
from mcp_backend.netsafety import allowed_schemes, redact_url
from mcp_backend.tools.dataset_stream import DatasetStream, FetchPolicy
from mcp_backend.tools.errors import (
    DatasetTemporarilyUnreachable,
    DatasetTooLarge,
    DatasetUnreachable,
    UnsafeDatasetUrl,
)

if TYPE_CHECKING:
    import httpx

S3_CHUNK_SIZE = 64 * 1024
_S3_MISSING_CODES = {
    "NoSuchKey": "the object does not exist",
    "NoSuchBucket": "the bucket does not exist",
    "AccessDenied": "access denied",
}


class S3Client(Protocol):
    """The boto3 S3 client methods used here (ranged reads and sizes for the durable analysis)."""

    def get_object(self, *, Bucket: str, Key: str, Range: str = ...) -> Mapping[str, Any]: ...
    def head_object(self, *, Bucket: str, Key: str) -> Mapping[str, Any]: ...


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
    elif scheme in allowed_schemes(allow_loopback_hosts=policy.allow_loopback_hosts):
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


# --- s3 ----------------------------------------------------------------------------------------------


@contextmanager
def _open_s3(url: str, policy: FetchPolicy, s3_client: S3Client | None) -> Iterator[DatasetStream]:
    shown = redact_url(url)
    parts = split_s3_url(url)
    if parts is None:
        raise UnsafeDatasetUrl(f"Dataset URL {shown} must look like s3://bucket/key")
    bucket, key = parts
    client = s3_client if s3_client is not None else _default_s3_client(policy)
    try:
        obj = client.get_object(Bucket=bucket, Key=key)
    except (botocore_errors.ClientError, botocore_errors.BotoCoreError) as exc:
        raise _s3_failure(exc, shown) from exc
    body = obj["Body"]
    try:
        content_length = obj.get("ContentLength")
        if content_length is not None and content_length > policy.max_bytes:
            raise DatasetTooLarge(f"Dataset {shown} is {content_length} bytes, over the {policy.max_bytes}-byte limit")
        yield DatasetStream(shown, _s3_chunks(body, shown), content_length=content_length, policy=policy)
    finally:
        body.close()


def _s3_failure(exc: Exception, shown: str) -> DatasetUnreachable:
    """What a failed GetObject means for the job: a missing or forbidden object stays so; throttling (SlowDown,
    503), 5xx and connection errors (after the SDK's own retries) may pass."""
    if isinstance(exc, botocore_errors.ClientError):
        code = str(exc.response.get("Error", {}).get("Code", "Unknown"))
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
        reason = _S3_MISSING_CODES.get(code, f"S3 error {code}")
        permanent = code in _S3_MISSING_CODES or (400 <= status < 500 and status not in (408, 429))
        error = DatasetUnreachable if permanent else DatasetTemporarilyUnreachable
        return error(f"Could not read dataset {shown}: {reason}")
    return DatasetTemporarilyUnreachable(f"Could not read dataset {shown}: {type(exc).__name__}")


def read_s3_range(
    url: str, policy: FetchPolicy, start: int, end: int, s3_client: Any | None = None
) -> tuple[bytes, int]:
    """Bytes `start` to `end` (inclusive) of an s3:// dataset, in one ranged GetObject, and the object's whole
    size (the durable analysis reads its dataset in such chunks)."""
    shown = redact_url(url)
    parts = split_s3_url(url)
    if parts is None:
        raise UnsafeDatasetUrl(f"Dataset URL {shown} must look like s3://bucket/key")
    client = s3_client if s3_client is not None else _default_s3_client(policy)
    try:
        obj = client.get_object(Bucket=parts[0], Key=parts[1], Range=f"bytes={start}-{end}")
        data = obj["Body"].read()
    except botocore_errors.ClientError as exc:
        if start == 0 and exc.response.get("Error", {}).get("Code") == "InvalidRange":
            return b"", 0  # an empty object has no byte 0
        raise _s3_failure(exc, shown) from exc
    except botocore_errors.BotoCoreError as exc:
        raise _s3_failure(exc, shown) from exc
    except OSError as exc:
        raise DatasetTemporarilyUnreachable(f"Reading dataset {shown} failed ({type(exc).__name__})") from exc
    total = str(obj.get("ContentRange", "")).rpartition("/")[2]
    return bytes(data), int(total) if total.isdigit() else len(data)


def s3_object_size(url: str, policy: FetchPolicy) -> int | None:
    """The size of an s3:// dataset (one HeadObject), or None when it cannot be read here: the run that follows
    reports why."""
    parts = split_s3_url(url)
    if parts is None:
        return None
    try:
        answer = _default_s3_client(policy).head_object(Bucket=parts[0], Key=parts[1])
    except (botocore_errors.ClientError, botocore_errors.BotoCoreError):
        return None
    return int(answer["ContentLength"])


def _s3_chunks(body: Any, shown: str) -> Iterator[bytes]:
    try:
        yield from body.iter_chunks(S3_CHUNK_SIZE)
    except (botocore_errors.BotoCoreError, OSError) as exc:
        raise DatasetTemporarilyUnreachable(f"Reading dataset {shown} failed ({type(exc).__name__})") from exc


def _default_s3_client(policy: FetchPolicy) -> S3Client:
    return new_client("s3", connect_timeout=policy.timeout_seconds, read_timeout=policy.timeout_seconds)
