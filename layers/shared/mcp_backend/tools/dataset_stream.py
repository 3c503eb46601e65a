"""What the dataset fetcher's sources share: the fetch policy, and the byte stream that enforces its cap."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

from mcp_backend.tools.errors import CallDeadlineExceeded, DatasetTooLarge


@dataclass(frozen=True)
class FetchPolicy:
    max_bytes: int = 50 * 1024 * 1024
    # Per network operation (connect, TLS, each read), never more than the time left of the deadline below.
    timeout_seconds: float = 10.0
    # Every https fetch ends within this many seconds of its start, all hops and the body included (the worker's
    # bound: a share of the function's timeout, mcp_backend.tools.services); a synchronous call's deadline may
    # end it sooner.
    fetch_deadline_seconds: float = 96.0  # 80 % of the default 120 s function timeout (ToolSettings)
    # Only the local dev stack sets this: loopback hosts (no other private address) and plain http://.
    allow_loopback_hosts: bool = False
    # s3:// datasets: the one bucket the functions may read, and the key prefixes in it every tenant may read
    # besides its own (mcp_backend.tools.dataset_access).
    dataset_bucket: str = ""
    shared_prefixes: tuple[str, ...] = ()
    # The memory one analysis may use: a share of the function's memory (mcp_backend.tools.services).
    memory_budget_bytes: int = 64 * 1024 * 1024
    # A synchronous call's end (time.monotonic()); None in the worker, whose function timeout bounds a job.
    deadline: float | None = None
    deadline_seconds: float = 0.0  # the same deadline as a duration, for the error that names it


class DatasetStream:
    """The dataset's bytes as an iterator of chunks, enforcing the byte cap as they arrive."""

    def __init__(self, url: str, chunks: Iterator[bytes], *, content_length: int | None, policy: FetchPolicy) -> None:
        self.url = url  # redacted: safe to report
        self.content_length = content_length
        self._chunks = chunks
        self._max_bytes = policy.max_bytes
        self._policy = policy
        self._bytes_read = 0

    @property
    def bytes_read(self) -> int:
        return self._bytes_read

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self._chunks:
            self._bytes_read += len(chunk)
            if self._bytes_read > self._max_bytes:
                raise DatasetTooLarge(f"Dataset {self.url} is larger than the {self._max_bytes}-byte limit")
            past_deadline(self._policy)
            if chunk:
                yield chunk


def past_deadline(policy: FetchPolicy) -> None:
    """Raises CallDeadlineExceeded once a synchronous call's deadline has passed."""
    if policy.deadline is not None and time.monotonic() > policy.deadline:
        raise call_deadline_exceeded(policy)


def call_deadline_exceeded(policy: FetchPolicy) -> CallDeadlineExceeded:
    return CallDeadlineExceeded(
        f"the call passed its {policy.deadline_seconds:g} s deadline for synchronous calls; "
        "submit it as a job (submit_analysis) for longer work"
    )
