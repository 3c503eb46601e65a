"""What the dataset fetcher's sources share: the fetch policy, and the byte stream that enforces its cap."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from mcp_backend.tools.errors import DatasetTooLarge


@dataclass(frozen=True)
class FetchPolicy:
    max_bytes: int = 50 * 1024 * 1024
    # Per network operation (connect, each read); the function's own timeout bounds the total.
    timeout_seconds: float = 10.0
    # Only the local dev stack sets this: loopback hosts (no other private address) and plain http://.
    allow_loopback_hosts: bool = False
    # s3:// datasets: the one bucket the functions may read, and the key prefixes in it every tenant may read
    # besides its own (mcp_backend.tools.dataset_access).
    dataset_bucket: str = ""
    shared_prefixes: tuple[str, ...] = ()


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
