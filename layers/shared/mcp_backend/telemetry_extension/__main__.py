"""The extension's process: register for INVOKE and SHUTDOWN, subscribe a loopback listener to platform
telemetry, ship each platform.report as a call-log record, flush at SHUTDOWN. It never fails an
invocation: without a stream it registers and idles; telemetry it cannot read is counted and skipped.

Lambda's init waits until every extension asks for its first event, and an extension's work competes with
the function's own for the environment's CPU, so its start imports only the standard library and loads
nothing more. The call-log code (pydantic, Powertools, boto3) loads on the pipeline thread when the first
delivery brings something to fold (the first invocation's runtimeDone or report); deliveries before it wait
in the inbox. After an INVOKE the extension asks for its next event only once that code is loaded (the
invocation's answer has gone out; only the environment's freeze waits, once per environment), so a SHUTDOWN
never finds it still loading; an environment never invoked never loads it. At SHUTDOWN it waits until the
report of every invocation it was told of has been folded (Lambda may deliver the last one after SHUTDOWN),
then flushes, all before the event's deadline."""

from __future__ import annotations

import json
import os
import queue
import sys
import threading
import time

from mcp_backend.telemetry_extension.api import ExtensionsClient
from mcp_backend.telemetry_extension.loopback_http import Listener

TYPE_CHECKING = False  # typing is not imported at run time (the cold start; see the module docstring)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    Build = Callable[[str, str], tuple[Any, Any]]  # (function name, stream) -> (ReportFolder, RecordShipper)

NAME = "call-log-telemetry"
# After SHUTDOWN Lambda gives external extensions what is left of its 2,000 ms shutdown limit (the runtime
# gets up to 300 ms of it first), then ends them with SIGKILL; the event's deadlineMs says when
# (https://docs.aws.amazon.com/lambda/latest/dg/runtimes-extensions-api.html, "Shutdown phase").
SHUTDOWN_LIMIT_SECONDS = 2.0
SHUTDOWN_MARGIN_SECONDS = 0.2  # exit before the deadline, not at it
SANDBOX_HOST = "sandbox.localdomain"
_CLOSE = object()
# What the report folder keeps; any other delivery (init and start events) waits, without loading anything.
_FOLDED = frozenset({"platform.runtimeDone", "platform.report"})


def serve_telemetry(inbox: queue.Queue[Any]) -> Listener:
    """The listener, at the sandbox's own name as the Telemetry API documents (127.0.0.1 where that name does
    not resolve), each delivery's JSON into `inbox` (None for a body that is not JSON)."""

    def deliver(body: bytes) -> None:
        try:
            inbox.put(json.loads(body))
        except ValueError:
            inbox.put(None)  # counted as malformed by the pipeline

    listener = Listener(SANDBOX_HOST)
    listener.serve(deliver)
    return listener


def carries_records(delivery: Any) -> bool:
    """Whether a delivery holds an event the report folder keeps (checked before the call-log code is loaded)."""
    return isinstance(delivery, list) and any(isinstance(e, dict) and e.get("type") in _FOLDED for e in delivery)


def build_shipper(function_name: str, stream: str) -> tuple[Any, Any]:
    """The call-log code, loaded here, with the first records (see the module docstring), not to break an import
    cycle."""
    from mcp_backend.aws import new_client
    from mcp_backend.calllog.shipper import RecordShipper
    from mcp_backend.calllog.writer import CallLogWriter
    from mcp_backend.telemetry_extension.reports import ReportFolder

    # Short timeouts and one SDK attempt per call (the writer retries): a stalled stream costs records,
    # and SHUTDOWN's budget is not spent waiting on it.
    kinesis = new_client("kinesis", connect_timeout=1, read_timeout=2, max_attempts=1)
    return ReportFolder(function_name), RecordShipper(CallLogWriter(stream, kinesis, max_attempts=2))


class TelemetryPipeline:
    """Deliveries folded into records and shipped on its own thread; it knows whose reports it has folded."""

    def __init__(self, function_name: str, stream: str, build: Build = build_shipper) -> None:
        self.function_name = function_name
        self.stream = stream
        self.build = build
        self.inbox: queue.Queue[Any] = queue.Queue()
        self.ready = threading.Event()  # set once the call-log code is loaded (or failed to load)
        self._changed = threading.Condition()
        self._invoked: set[str] = set()
        self._reported: set[str] = set()
        self._deadline = float("inf")
        self._thread = threading.Thread(target=self._run, name="pipeline", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def invoked(self, request_id: str, deadline: float) -> None:
        """An INVOKE: its report is owed at SHUTDOWN. Returns once the call-log code is loaded (by `deadline`)."""
        with self._changed:
            self._invoked.add(request_id)
        self.ready.wait(_remaining(deadline))

    def finish(self, deadline: float) -> None:
        """SHUTDOWN: wait for the report of every invocation announced, then flush; all by `deadline`."""
        with self._changed:
            self._changed.wait_for(
                lambda: self._invoked <= self._reported or not self._thread.is_alive(),
                timeout=_remaining(deadline),
            )
            self._deadline = deadline
        self.inbox.put(_CLOSE)
        self._thread.join(_remaining(deadline))

    def _run(self) -> None:
        backlog = self._until_first_records()
        if not backlog:
            self.ready.set()
            return  # SHUTDOWN before any invocation: nothing to ship, nothing loaded
        try:
            folder, shipper = self.build(self.function_name, self.stream)
        finally:
            self.ready.set()  # a failed load must not hold INVOKEs: the extension then only idles
        for delivery in backlog:
            self._fold(folder, shipper, delivery)
        while (delivery := self.inbox.get()) is not _CLOSE:
            self._fold(folder, shipper, delivery)
        with self._changed:
            budget = _remaining(self._deadline)
        shipper.close(SHUTDOWN_LIMIT_SECONDS if budget is None else budget)

    def _until_first_records(self) -> list[Any]:
        """The deliveries up to the first one carrying records, in order; [] if SHUTDOWN came first."""
        backlog = []
        while (delivery := self.inbox.get()) is not _CLOSE:
            backlog.append(delivery)
            if carries_records(delivery):
                return backlog
        return []

    def _fold(self, folder: Any, shipper: Any, delivery: Any) -> None:
        records = folder.fold(delivery)
        shipper.add(records)
        with self._changed:
            self._reported.update(str(record.request_id) for record in records)
            self._changed.notify_all()


def _remaining(deadline: float) -> float | None:
    """Seconds until a monotonic deadline (None: no deadline)."""
    return None if deadline == float("inf") else max(0.0, deadline - time.monotonic())


def deadline_of(event: dict[str, Any], limit_seconds: float | None = None) -> float:
    """The event's deadlineMs (epoch) as a monotonic time, less the margin; never later than `limit_seconds`."""
    now = time.monotonic()
    remaining = float(event.get("deadlineMs", 0)) / 1000 - time.time() if "deadlineMs" in event else float("inf")
    if limit_seconds is not None:
        remaining = min(remaining, limit_seconds)
    return now + remaining - SHUTDOWN_MARGIN_SECONDS


def main(
    client: Any = None,
    environ: Any = os.environ,
    build: Build = build_shipper,
    shutdown_limit_seconds: float = SHUTDOWN_LIMIT_SECONDS,
) -> int:
    client = client or ExtensionsClient(environ["AWS_LAMBDA_RUNTIME_API"], NAME)
    stream = environ.get("CALL_LOG_STREAM_NAME", "")
    enabled = bool(stream)  # the template attaches the layer only when CallLogTelemetry is enabled
    client.register(["INVOKE", "SHUTDOWN"] if enabled else ["SHUTDOWN"])
    pipeline = None
    if enabled:
        pipeline = TelemetryPipeline(environ.get("AWS_LAMBDA_FUNCTION_NAME", "unknown"), stream, build)
        pipeline.start()
        # Listening before subscribing, as the Telemetry API asks ("Before subscribing to receive telemetry, set up
        # the local HTTP listener", telemetry-api.html, "Specifying a destination protocol").
        listener = serve_telemetry(pipeline.inbox)
        client.subscribe(f"http://{SANDBOX_HOST}:{listener.port}", ["platform"])
    while True:
        event = client.next_event()
        if event.get("eventType") == "INVOKE" and pipeline is not None:
            pipeline.invoked(str(event.get("requestId")), deadline_of(event))
        elif event.get("eventType") == "SHUTDOWN":
            if pipeline is not None:
                pipeline.finish(deadline_of(event, shutdown_limit_seconds))
            return 0


if __name__ == "__main__":
    sys.exit(main())
