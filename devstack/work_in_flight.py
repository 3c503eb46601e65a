"""Work under way in the local stack, each unit with the deadline its function's timeout gives it, so a stop waits
for what is in flight and for no longer than that work may run: an idle stack stops at once, and a busy function
holds the stop for its own timeout, never for the longest timeout in the template.

Two kinds of unit. An SQS poller admits each batch it received before invoking the function: once the stop has
closed the gate a batch is refused, its messages stay in flight (kept by STATE, visible again after their visibility
timeout) and the function is not invoked after the stop began; a poller sitting in a long poll (up to 20 s) is not
work and is not waited for. Every invocation (event sources, asynchronous invokes, the Lambda API) is tracked while
it runs, whether or not the stop has begun, so the stop waits for it too.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class WorkInFlight:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._changed = threading.Condition()
        self._deadlines: dict[int, float] = {}  # token -> when the unit's function times out
        self._tokens = itertools.count()
        self._closed = False
        self._clock = clock

    def admit(self, timeout_seconds: float) -> int | None:
        """A token for done(); None once the stop has begun (leave the work alone)."""
        with self._changed:
            return None if self._closed else self._add(timeout_seconds)

    @contextmanager
    def tracked(self, timeout_seconds: float) -> Iterator[None]:
        """Track work already asked for, which runs whether or not the stop has begun."""
        with self._changed:
            token = self._add(timeout_seconds)
        try:
            yield
        finally:
            self.done(token)

    def done(self, token: int) -> None:
        with self._changed:
            self._deadlines.pop(token, None)
            self._changed.notify_all()

    def close(self) -> None:
        """Refuse new admissions (tracked work still runs)."""
        with self._changed:
            self._closed = True

    def wait(self, grace: float) -> bool:
        """Wait until nothing is under way, or until every unit under way is `grace` seconds past its deadline.
        True: nothing is left; False: something was still running when the wait gave up on it."""
        with self._changed:
            while self._deadlines:
                remaining = max(self._deadlines.values()) + grace - self._clock()
                if remaining <= 0:
                    return False
                self._changed.wait(remaining)
            return True

    def _add(self, timeout_seconds: float) -> int:
        token = next(self._tokens)
        self._deadlines[token] = self._clock() + timeout_seconds
        return token
