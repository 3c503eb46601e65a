"""How many of an SQS mapping's pollers long-poll its queue at once.

"For standard queues, Lambda uses long polling to poll a queue until it becomes active. When messages are
available, Lambda starts processing five batches at a time with five concurrent invocations of your
function" (https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-scaling.html). The stack gives a
mapping as many pollers as its function may run environments; while the queue is idle one of them
long-polls and the others wait here (a long poll that waits costs moto a re-check a second). The first
message lets every poller poll; a long poll that ends empty (the queue idle again) returns it to one.
"""

from __future__ import annotations

import threading


class PollerGate:
    def __init__(self, pollers: int) -> None:
        self.pollers = pollers
        self._allowed = 1
        self._polling = 0
        self._closed = False
        self._changed = threading.Condition()

    def enter(self, block: bool = True) -> bool:
        """Wait for a turn to poll (block=False: only if one is free now); False once closed."""
        with self._changed:
            while self._polling >= self._allowed and not self._closed:
                if not block:
                    return False
                self._changed.wait()
            if self._closed:
                return False
            self._polling += 1
            return True

    def active(self) -> None:
        """A poll received messages: every poller may poll."""
        with self._changed:
            self._allowed = self.pollers
            self._changed.notify_all()

    def leave(self, received: bool) -> None:
        """A poll ended; one that received nothing returns the queue to one poller."""
        with self._changed:
            self._polling -= 1
            if not received:
                self._allowed = 1
            self._changed.notify_all()

    def close(self) -> None:
        """The stack stops: waiting pollers end."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()
