"""The batches SQS pollers are delivering, so a stop waits for those and not for the pollers that sit
in a long poll (up to 20 s) waiting for a message.

A poller admits each batch it received before invoking the function. Once the stop has closed the
gate, a batch is refused: its messages stay in flight (kept by STATE, visible again after their
visibility timeout) and the function is not invoked after the stop has begun.
"""

from __future__ import annotations

import threading


class Deliveries:
    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._under_way = 0
        self._closed = False

    def admit(self) -> bool:
        """True: deliver, then call done(). False: the stack is stopping, leave the batch alone."""
        with self._changed:
            if self._closed:
                return False
            self._under_way += 1
            return True

    def done(self) -> None:
        with self._changed:
            self._under_way -= 1
            self._changed.notify_all()

    def close(self, timeout: float) -> bool:
        """Refuse new batches and wait for the ones under way; False if some were still running at the timeout."""
        with self._changed:
            self._closed = True
            return self._changed.wait_for(lambda: self._under_way == 0, timeout)
