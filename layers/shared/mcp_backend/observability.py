"""Logger and Metrics shared by every handler (the handler decorator stack below builds on these)."""

from __future__ import annotations

import functools
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import EphemeralMetrics, MetricUnit, single_metric

from mcp_backend.snapstart import register_hooks as register_snapstart_hooks
from mcp_backend.tracing.setup import configure as configure_tracing
from mcp_backend.tracing.setup import flush as flush_spans

Handler = Callable[[Any, Any], Any]


class CurrentStdoutHandler(logging.StreamHandler):
    """Writes each line to sys.stdout as it is when the line is written (unless a stream is set explicitly,
    with setStream). On Lambda that is always the same stream; where one process hosts several functions or
    test runs that swap sys.stdout (the local stack's in-process runtime, pytest's capture), a handler bound at
    import would write into a stream closed since."""

    def __init__(self) -> None:
        logging.Handler.__init__(self)
        self._pinned: Any = None

    @property
    def stream(self) -> Any:
        return self._pinned if self._pinned is not None else sys.stdout

    @stream.setter
    def stream(self, value: Any) -> None:
        self._pinned = value

    def setStream(self, stream: Any) -> Any:
        """Pin `stream` (None: follow sys.stdout again); returns what was pinned, so restoring it with the
        returned value unpins a handler that followed sys.stdout, instead of pinning the stdout of that moment."""
        previous = self._pinned
        self.flush()
        self._pinned = stream
        return previous


logger = Logger(logger_handler=CurrentStdoutHandler())
metrics = Metrics(service=os.environ.get("POWERTOOLS_SERVICE_NAME", "mcp-backend"))
# Constant labels only: per-tool labels are per-record dimensions (bounded metric streams). The service label is
# Powertools' own `service` dimension (from POWERTOOLS_SERVICE_NAME), added to every blob at flush: a second,
# capitalised copy would double every metric, since each dimension combination is its own billed metric
# (https://docs.aws.amazon.com/AmazonCloudWatch/latest/APIReference/API_Dimension.html,
# https://aws.amazon.com/cloudwatch/pricing/).
metrics.set_default_dimensions(Environment=os.environ.get("ENVIRONMENT", "dev"))


@dataclass
class _ToolRuns:
    succeeded: int = 0
    failed: int = 0
    durations_ms: list[float] = field(default_factory=list)


class ToolRunMetrics:
    """ToolInvocation, ToolSuccess or ToolError, and ToolDuration of every tool run, with a ToolName dimension.

    A blob's dimensions are the blob's, so each tool name gets its own. Runs are gathered and written as one EMF
    blob per tool name per flush, instead of a blob per run: a batch or a busy endpoint prints and parses a
    blob per tool and second, not per call. The counts are summed per blob (the same Sum as a blob per run; the
    dashboards read Sum) and every run's duration is a value of its own (the same percentiles); a blob is stamped
    with the time of the oldest run in it. `instrumented_handler` flushes at the end of every invocation; the MCP
    endpoint, which has no invocation end, when a run finds the oldest pending one `interval_seconds` old, after
    each request once they are, and at shutdown. Runs happen in threads at once: the pending runs are shared,
    behind a lock.
    """

    # Durations per blob: below the 100 values of one metric (Powertools' MAX_METRICS) at which Powertools would
    # flush a blob on its own, with the dimensions it had then.
    MAX_RUNS_PER_BLOB = 50

    def __init__(self, interval_seconds: float = 1.0) -> None:
        self.interval_seconds = interval_seconds
        self._lock = threading.Lock()
        self._pending: dict[str, _ToolRuns] = {}
        self._oldest: float | None = None  # epoch seconds of the oldest pending run
        # Its own metric set: the handler-wide `metrics` keeps its blob and timestamp.
        self._emf = EphemeralMetrics(service=metrics.service, namespace=metrics.namespace)
        self._emf.set_default_dimensions(**metrics.default_dimensions)

    @contextmanager
    def run(self, tool_name: str) -> Iterator[None]:
        """Count and time one run of `tool_name` (an error if it raises)."""
        started = time.monotonic()
        succeeded = False
        try:
            yield
            succeeded = True
        finally:
            self._add(tool_name, succeeded, (time.monotonic() - started) * 1000)

    def flush_if_due(self) -> None:
        if self._oldest is not None and time.time() - self._oldest >= self.interval_seconds:
            self.flush()

    def flush(self) -> None:
        """Write what is pending, one blob per tool name."""
        with self._lock:
            pending, self._pending = self._pending, {}
            oldest, self._oldest = self._oldest, None
            for tool_name, runs in pending.items():
                try:
                    self._write(tool_name, runs, oldest)
                except Exception as error:  # noqa: BLE001 - a metric never fails the run it measures
                    self._emf.clear_metrics()
                    logger.warning(
                        "tool-run metrics dropped",
                        extra={"tool": tool_name, "runs": len(runs.durations_ms), "error_type": type(error).__name__},
                    )
            if pending:
                # Powertools prints; stdout is a block-buffered pipe on Lambda, and the process may be killed
                # right after its shutdown hooks: the blobs leave the process now.
                sys.stdout.flush()

    def _write(self, tool_name: str, runs: _ToolRuns, oldest: float | None) -> None:
        self._emf.set_timestamp(int((oldest or time.time()) * 1000))
        self._emf.add_dimension(name="ToolName", value=tool_name)
        counts = (("ToolInvocation", len(runs.durations_ms)), ("ToolSuccess", runs.succeeded))
        for name, count in (*counts, ("ToolError", runs.failed)):
            if count:
                self._emf.add_metric(name=name, unit=MetricUnit.Count, value=count)
        for duration in runs.durations_ms:
            self._emf.add_metric(name="ToolDuration", unit=MetricUnit.Milliseconds, value=duration)
        self._emf.flush_metrics()

    def _add(self, tool_name: str, succeeded: bool, duration_ms: float) -> None:
        with self._lock:
            runs = self._pending.setdefault(tool_name, _ToolRuns())
            if succeeded:
                runs.succeeded += 1
            else:
                runs.failed += 1
            runs.durations_ms.append(duration_ms)
            now = time.time()
            if self._oldest is None:
                self._oldest = now
            due = len(runs.durations_ms) >= self.MAX_RUNS_PER_BLOB or now - self._oldest >= self.interval_seconds
        if due:
            self.flush()


tool_runs = ToolRunMetrics()


def count_limit_refusal(limit: str, tier: str, user_id: str, resets: str = "") -> None:
    """One refused request or submission: a LimitRefused metric whose dimensions are the limit and the tier
    (bounded: five limits, three tiers), and a WARNING line that names the principal. A user id as a metric
    dimension would be one custom metric per user (cost and cardinality without bound); who is throttled
    is read from the log line instead (docs/security.md has the Logs Insights query)."""
    with single_metric(name="LimitRefused", unit=MetricUnit.Count, value=1, namespace=metrics.namespace) as metric:
        metric.add_dimension(name="service", value=metrics.service or "mcp-backend")
        metric.add_dimension(name="Limit", value=limit)
        metric.add_dimension(name="Tier", value=tier)
    logger.warning("limit refused", extra={"limit": limit, "tier": tier, "principal": user_id, "resets": resets})


def count_refusal(reason: str) -> None:
    """One refused request or malformed credential (RequestRefused, dimension Reason): a constant name per
    kind of refusal, never anything from the request, so the metric's streams stay bounded."""
    with single_metric(name="RequestRefused", unit=MetricUnit.Count, value=1, namespace=metrics.namespace) as metric:
        metric.add_dimension(name="Reason", value=reason)


def instrumented_handler(correlation_id_path: str | None = None) -> Callable[[Handler], Handler]:
    """The decorator stack every Lambda handler carries, in its order (outermost first):
    - inject_lambda_context(clear_state=True, log_event=False): context keys on every line, no state
      leaking between warm invocations, and no event (payloads) in the logs;
    - log_metrics(capture_cold_start_metric=True): flushes even when the handler raises;
    - the invocation's tool runs (ToolRunMetrics) flushed at its end, raised or not, and with tracing on its
      spans exported (before Lambda may freeze the environment).
    Decorating also registers the SnapStart restore hook (mcp_backend.snapstart), during init as Lambda requires,
    and configures tracing (mcp_backend.tracing.setup: off unless TRACING_MODE says otherwise).
    """

    def decorate(handler: Handler) -> Handler:
        register_snapstart_hooks()
        configure_tracing()

        @functools.wraps(handler)
        def flushing_tool_runs(event: Any, context: Any) -> Any:
            try:
                return handler(event, context)
            finally:
                tool_runs.flush()
                flush_spans()

        with_metrics = metrics.log_metrics(capture_cold_start_metric=True)(flushing_tool_runs)
        return logger.inject_lambda_context(clear_state=True, correlation_id_path=correlation_id_path, log_event=False)(
            with_metrics
        )

    return decorate
