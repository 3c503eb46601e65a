"""Logger and Metrics shared by every handler (the handler decorator stack below builds on these)."""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit, single_metric

from mcp_backend.snapstart import register_hooks as register_snapstart_hooks

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


logger = Logger(logger_handler=CurrentStdoutHandler())
metrics = Metrics(service=os.environ.get("POWERTOOLS_SERVICE_NAME", "mcp-backend"))
# Constant labels only: per-tool labels are per-record dimensions (bounded metric streams). The service label is
# Powertools' own `service` dimension (from POWERTOOLS_SERVICE_NAME), added to every blob at flush: a second,
# capitalised copy would double every metric, since each dimension combination is its own billed metric
# (https://docs.aws.amazon.com/AmazonCloudWatch/latest/APIReference/API_Dimension.html,
# https://aws.amazon.com/cloudwatch/pricing/).
metrics.set_default_dimensions(Environment=os.environ.get("ENVIRONMENT", "dev"))
_METRICS_LOCK = threading.Lock()


@contextmanager
def tool_invocation(tool_name: str) -> Iterator[None]:
    """Count and time one tool run; flushes its own EMF blob so ToolName stays per-run.

    A batch mixes tools, so a handler-wide ToolName dimension would mislabel all but one record.
    Records run in threads at once: the metric set is shared, so one run's dimension, metrics and
    flush happen together under a lock, after the run.
    """
    started = time.monotonic()
    outcome = "ToolError"
    try:
        yield
        outcome = "ToolSuccess"
    finally:
        with _METRICS_LOCK:
            metrics.add_dimension(name="ToolName", value=tool_name)
            metrics.add_metric(name="ToolInvocation", unit=MetricUnit.Count, value=1)
            metrics.add_metric(name=outcome, unit=MetricUnit.Count, value=1)
            metrics.add_metric(
                name="ToolDuration", unit=MetricUnit.Milliseconds, value=(time.monotonic() - started) * 1000
            )
            metrics.flush_metrics()


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
    - log_metrics(capture_cold_start_metric=True): flushes even when the handler raises.
    Decorating also registers the SnapStart restore hook (mcp_backend.snapstart), during init as Lambda requires.
    """

    def decorate(handler: Handler) -> Handler:
        register_snapstart_hooks()
        handler = metrics.log_metrics(capture_cold_start_metric=True)(handler)
        return logger.inject_lambda_context(clear_state=True, correlation_id_path=correlation_id_path, log_event=False)(
            handler
        )

    return decorate
