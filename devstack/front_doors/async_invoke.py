"""Asynchronous invocation (InvocationType Event, schedules, SNS, EventBridge), as Lambda runs it.

https://docs.aws.amazon.com/lambda/latest/dg/invocation-async.html
https://docs.aws.amazon.com/lambda/latest/dg/invocation-async-retain-records.html
- the event waits in an internal queue; a function error is retried up to MaximumRetryAttempts
  (default 2) times, Lambda waiting about 1 and then 2 minutes (the local stack's waits are
  configurable, 0 in tests);
- an event older than MaximumEventAgeInSeconds (default 6 h) is not run again but sent to OnFailure
  with condition EventAgeExceeded;
- success goes to OnSuccess (condition Success), exhausted retries to OnFailure (RetriesExhausted),
  each as the invocation record envelope.
"""

from __future__ import annotations

import datetime as dt
import heapq
import itertools
import logging
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from devstack.front_doors.destinations import Destinations
from devstack.runtime.function_errors import error_document

log = logging.getLogger("devstack.async")

DEFAULT_MAX_RETRIES = 2
DEFAULT_MAX_EVENT_AGE = 6 * 3600
AWS_RETRY_DELAYS = (60.0, 120.0)


@dataclass(frozen=True)
class AsyncConfig:
    max_retries: int = DEFAULT_MAX_RETRIES
    max_event_age: int = DEFAULT_MAX_EVENT_AGE
    on_success: str | None = None
    on_failure: str | None = None

    @classmethod
    def from_event_invoke_config(cls, properties: dict[str, Any]) -> AsyncConfig:
        destinations = properties.get("DestinationConfig", {})
        return cls(
            max_retries=int(properties.get("MaximumRetryAttempts", DEFAULT_MAX_RETRIES)),
            max_event_age=int(properties.get("MaximumEventAgeInSeconds", DEFAULT_MAX_EVENT_AGE)),
            on_success=destinations.get("OnSuccess", {}).get("Destination"),
            on_failure=destinations.get("OnFailure", {}).get("Destination"),
        )


@dataclass(order=True)
class _Pending:
    due: dt.datetime
    order: int
    function: str = field(compare=False)
    payload: Any = field(compare=False)
    request_id: str = field(compare=False)
    queued_at: dt.datetime = field(compare=False)
    attempts: int = field(default=0, compare=False)
    last_error: dict[str, Any] | None = field(default=None, compare=False)


@dataclass
class AsyncResult:
    request_id: str
    function: str
    condition: str
    attempts: int
    envelope: dict[str, Any]


class AsyncInvoker:
    def __init__(
        self,
        invoke: Callable[[str, Any], Any],
        function_arn: Callable[[str], str],
        configs: dict[str, AsyncConfig],
        destinations: Destinations,
        retry_delays: tuple[float, ...] = AWS_RETRY_DELAYS,
        clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
    ) -> None:
        self.invoke = invoke
        self.function_arn = function_arn
        self.configs = configs
        self.destinations = destinations
        self.retry_delays = retry_delays
        self.clock = clock
        self.results: list[AsyncResult] = []
        self._queue: list[_Pending] = []
        self._order = itertools.count()
        self._lock = threading.Condition()
        self._closed = False  # close(): the stack is stopping

    def submit(self, function: str, payload: Any, queued_at: dt.datetime | None = None) -> str:
        """Accept an event (Lambda answers 202 here); returns the request id."""
        now = self.clock()
        pending = _Pending(now, next(self._order), function, payload, str(uuid.uuid4()), queued_at or now)
        with self._lock:
            heapq.heappush(self._queue, pending)
            self._lock.notify_all()
        return pending.request_id

    def run_due(self) -> list[AsyncResult]:
        """Run every attempt that is due now; retries scheduled later stay queued."""
        finished: list[AsyncResult] = []
        while True:
            with self._lock:
                if not self._queue or self._queue[0].due > self.clock():
                    return finished
                pending = heapq.heappop(self._queue)
            result = self._attempt(pending)
            if result is not None:
                finished.append(result)

    def next_due_in(self) -> float | None:
        with self._lock:
            if not self._queue:
                return None
            return max(0.0, (self._queue[0].due - self.clock()).total_seconds())

    def wait_for_work(self, timeout: float | None) -> None:
        """Sleep until an event is due (`timeout`, None: none queued), one is submitted, or close()."""
        with self._lock:
            self._lock.wait_for(
                lambda: self._closed or bool(self._queue and self._queue[0].due <= self.clock()), timeout
            )

    def close(self) -> None:
        """Wake wait_for_work for good (the stack is stopping)."""
        with self._lock:
            self._closed = True
            self._lock.notify_all()

    # ------------------------------------------------------------------ internals
    def _attempt(self, pending: _Pending) -> AsyncResult | None:
        config = self.configs.get(pending.function, AsyncConfig())
        if (self.clock() - pending.queued_at).total_seconds() > config.max_event_age:
            return self._finish(pending, config, "EventAgeExceeded", None)
        pending.attempts += 1
        try:
            response = self.invoke(pending.function, pending.payload)
        except Exception as error:  # noqa: BLE001 - the function error Lambda records
            pending.last_error = error_document(error)
            if pending.attempts > config.max_retries:
                return self._finish(pending, config, "RetriesExhausted", pending.last_error)
            delay = self.retry_delays[min(pending.attempts - 1, len(self.retry_delays) - 1)]
            pending.due = self.clock() + dt.timedelta(seconds=delay)
            with self._lock:
                heapq.heappush(self._queue, pending)
            return None
        return self._finish(pending, config, "Success", response)

    def _finish(self, pending: _Pending, config: AsyncConfig, condition: str, response: Any) -> AsyncResult:
        arn = f"{self.function_arn(pending.function)}:$LATEST"
        envelope: dict[str, Any] = {
            "version": "1.0",
            "timestamp": self.clock().isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "requestContext": {
                "requestId": pending.request_id,
                "functionArn": arn,
                "condition": condition,
                "approximateInvokeCount": pending.attempts,
            },
            "requestPayload": pending.payload,
        }
        if pending.attempts:
            envelope["responseContext"] = {"statusCode": 200, "executedVersion": "$LATEST"}
            if condition != "Success":
                envelope["responseContext"]["functionError"] = "Unhandled"
            envelope["responsePayload"] = response if condition == "Success" else pending.last_error
        destination = config.on_success if condition == "Success" else config.on_failure
        if destination:
            self.destinations.deliver(destination, envelope, success=condition == "Success")
        elif condition != "Success":
            log.warning("%s: async event dropped (%s), no OnFailure destination", pending.function, condition)
        result = AsyncResult(pending.request_id, pending.function, condition, pending.attempts, envelope)
        self.results.append(result)
        return result
