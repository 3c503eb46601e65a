"""Keeps the messages of running jobs hidden while they run, so a job slower than half the queue's
visibility timeout is not delivered a second time meanwhile.

One thread per invocation wakes every half visibility timeout (counted from the invocation's start,
which is after the receive) and extends every running record's message by one visibility timeout
from now, never past the function's remaining time: once the function is stopped, its messages
become visible again as without the heartbeat. A record leaves the heartbeat as soon as it succeeds
or fails, so a failed record's retry is not delayed further.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from mcp_backend.jobs.queue import JobQueueMessages


class VisibilityHeartbeat:
    def __init__(self, messages: JobQueueMessages, visibility_timeout_seconds: int) -> None:
        self.messages = messages
        self.visibility_timeout_seconds = visibility_timeout_seconds
        self._running: dict[str, str] = {}  # messageId -> receipt handle
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._context: Any = None

    def start(self, lambda_context: Any) -> None:
        self.stop()
        self._context = lambda_context
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, args=(self._stop,), name="visibility-heartbeat", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        with self._lock:
            self._running.clear()

    @contextmanager
    def running(self, message_id: str, receipt_handle: str) -> Iterator[None]:
        with self._lock:
            self._running[message_id] = receipt_handle
        try:
            yield
        finally:
            with self._lock:
                self._running.pop(message_id, None)

    def _beat(self, stop: threading.Event) -> None:
        interval = self.visibility_timeout_seconds / 2
        while not stop.wait(interval):
            with self._lock:
                handles = list(self._running.values())
            if not handles:
                continue
            remaining = self._remaining_seconds()
            if remaining <= 0:
                return
            self.messages.extend_visibility(handles, min(self.visibility_timeout_seconds, remaining))

    def _remaining_seconds(self) -> int:
        remaining_millis = getattr(self._context, "get_remaining_time_in_millis", None)
        if remaining_millis is None:
            return self.visibility_timeout_seconds
        return math.ceil(remaining_millis() / 1000)
