"""A signal raised when a write lands in the local AWS endpoint, so event-source loops wait for work
instead of polling an idle stack.

The moto server's WSGI app is wrapped: after each request that may have written (anything but the
reads and deletes the event sources themselves make), the generation counter moves on and waiters
wake. A loop notes the generation, polls, then waits for it to change; a write during the poll makes
the wait return at once, so nothing is missed. Spurious wake-ups only cost one extra poll.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

# Requests that never create work for an event source: what the pollers and the TTL sweeper send.
_READS = frozenset(
    {
        "GetRecords",
        "GetShardIterator",
        "ListShards",
        "DescribeStream",
        "DescribeStreamSummary",
        "ListStreams",
        "ReceiveMessage",
        "DeleteMessage",
        "DeleteMessageBatch",
        "GetQueueUrl",
        "GetQueueAttributes",
        "Scan",
        "Query",
        "GetItem",
        "DescribeTable",
    }
)


class WriteSignal:
    def __init__(self) -> None:
        self._changed = threading.Condition()
        self.generation = 0

    def notify(self) -> None:
        with self._changed:
            self.generation += 1
            self._changed.notify_all()

    def wait_after(self, generation: int, timeout: float | None) -> None:
        """Return once a write landed after `generation` was read, or after `timeout` seconds (None: no limit)."""
        with self._changed:
            self._changed.wait_for(lambda: self.generation != generation, timeout)

    def wrap(self, app: Callable[..., Iterable[bytes]]) -> Callable[..., Iterable[bytes]]:
        """The WSGI app, signalling after each request that may have written."""

        def signalling(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
            try:
                return app(environ, start_response)
            finally:
                action = environ.get("HTTP_X_AMZ_TARGET", "").rsplit(".", 1)[-1]
                if action not in _READS:
                    self.notify()

        return signalling
