"""What CallLogAnalyzer does with the actionable call-log records its ESM filter lets through:
per-tool error metrics, one alert per tool whose errors in the batch reach the threshold and one per
endpoint schema drift; and, from the platform reports the call-log-telemetry extension writes, per function:
cold-start rate, p50/p99 duration, timeouts and memory headroom, with an alert on a timeout burst or
memory near the limit. Each record counts once: its contribution runs inside the run-once body, keyed on its
position in the stream, so a redelivered record (retry from a failed sequence number, bisection,
timeout) adds nothing twice. An alert of one type about one subject goes out at most once per window across every
instance (calllog/alert_windows.py); the next one carries the count of those suppressed."""

from __future__ import annotations

import binascii
import json
import math
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.data_classes.kinesis_stream_event import KinesisStreamRecord
from pydantic import ValidationError

from mcp_backend.aws import client_or_lazy
from mcp_backend.calllog.alert_windows import AlertDecision, AlertWindows
from mcp_backend.calllog.models import ACTIONABLE, CallLogEventType, CallLogRecord
from mcp_backend.config import CallLogAnalyzerSettings
from mcp_backend.observability import logger, metrics
from mcp_backend.streams import StreamRecordConsumer, kinesis_position
from mcp_backend.validation import describe_validation_error

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_sns import SNSClient

# Per-subject metric names; tools get a ToolName dimension, endpoints are counted in total only
# (thousands of endpoints would be thousands of metric streams).
_METRIC_BY_EVENT = {
    CallLogEventType.TOOL_ERROR: "CallLogToolErrors",
    CallLogEventType.JOB_FAILED: "CallLogJobFailures",
    CallLogEventType.SCHEMA_DRIFT: "CallLogSchemaDrifts",
    CallLogEventType.PROBES_STOPPED: "CallLogProbesStopped",
}
# One record per change of an endpoint's state: each is worth an alert, whatever the threshold (first one wins).
_ALWAYS_ALERTING = (CallLogEventType.SCHEMA_DRIFT, CallLogEventType.PROBES_STOPPED)


@dataclass
class FunctionStats:
    """One function's platform reports within a batch."""

    invocations: int = 0
    cold_starts: int = 0
    timeouts: int = 0
    durations: list[float] = field(default_factory=list)
    memory_percent: float = 0.0  # the highest share of its memory limit an invocation used

    def add(self, record: CallLogRecord) -> None:
        self.invocations += 1
        self.cold_starts += bool(record.cold_start)
        self.timeouts += record.status == "timeout"
        if record.duration_ms is not None:
            self.durations.append(record.duration_ms)
        if record.max_memory_used_mb is not None and record.memory_size_mb:
            self.memory_percent = max(self.memory_percent, 100 * record.max_memory_used_mb / record.memory_size_mb)

    def percentile(self, share: float) -> float:
        """Nearest-rank percentile of the batch's durations."""
        ordered = sorted(self.durations)
        return ordered[max(0, math.ceil(share * len(ordered)) - 1)] if ordered else 0.0


class MalformedCallLogRecord(ValueError):
    """The record is not a call-log record: it fails, bisection isolates it, OnFailure keeps its position."""


def parse_call_log_record(record: KinesisStreamRecord) -> CallLogRecord:
    try:
        return CallLogRecord.model_validate(record.kinesis.data_as_json())
    except (binascii.Error, UnicodeDecodeError, json.JSONDecodeError):
        raise MalformedCallLogRecord("record data is not base64-encoded JSON") from None
    except ValidationError as error:
        raise MalformedCallLogRecord(f"record is not a call-log record: {describe_validation_error(error)}") from None


class CallLogAnalyzer(StreamRecordConsumer):
    def __init__(
        self,
        settings: CallLogAnalyzerSettings,
        sns_client: SNSClient | None = None,
        *,
        idempotent: bool = True,
        idempotency_client: DynamoDBClient | None = None,
        alert_windows_client: DynamoDBClient | None = None,
    ) -> None:
        super().__init__(settings, idempotent=idempotent, idempotency_client=idempotency_client)
        self.alert_windows = AlertWindows(
            settings.alert_window_table_name, settings.alert_dedup_window_seconds, alert_windows_client
        )
        sns_client = client_or_lazy(sns_client, "sns")
        self.topic_arn = settings.alert_topic_arn
        self.threshold = settings.error_alert_threshold
        self._sns = sns_client
        self.timeout_threshold = settings.timeout_alert_threshold
        self.memory_percent = settings.memory_alert_percent
        self._counts: dict[str, Counter[CallLogEventType]] = defaultdict(Counter)
        self._latest: dict[str, CallLogRecord] = {}
        self._functions: dict[str, FunctionStats] = defaultdict(FunctionStats)

    def start_invocation(self, lambda_context: Any) -> None:
        super().start_invocation(lambda_context)
        self._counts.clear()
        self._latest.clear()
        self._functions.clear()

    def process(self, record: KinesisStreamRecord) -> dict[str, Any]:
        """Record handler: raises on a malformed record or a failed run-once write."""
        position = kinesis_position(record)
        event = parse_call_log_record(record)
        if event.event_type not in ACTIONABLE:
            # The ESM filter keeps these out; if one comes anyway it is not an error to retry.
            logger.debug("non-actionable call-log record ignored", extra={"event_type": event.event_type})
            return {"ignored": True}
        return self.apply_once(position=position, record=event)

    def apply(self, *, position: dict[str, str], record: CallLogRecord) -> dict[str, Any]:
        if record.event_type is CallLogEventType.PLATFORM_REPORT:
            self._functions[str(record.function_name)].add(record)
            return {"subject": record.subject, "eventType": record.event_type}
        self._counts[record.subject][record.event_type] += 1
        self._latest[record.subject] = record
        return {"subject": record.subject, "eventType": record.event_type}

    def finish_invocation(self) -> None:
        """Metrics for what this batch counted, then the alerts. Never raises: the records are done."""
        try:
            self._emit_metrics()
            for subject, counts in self._counts.items():
                if self._alerting(counts):
                    self._alert(subject, counts, self._latest[subject])
            for function, stats in self._functions.items():
                self._emit_function_metrics(function, stats)
                self._alert_on_function(function, stats)
        finally:
            self._counts.clear()
            self._latest.clear()
            self._functions.clear()

    # ------------------------------------------------------------------ internals
    def _alerting(self, counts: Counter[CallLogEventType]) -> bool:
        return any(counts[event_type] for event_type in _ALWAYS_ALERTING) or counts.total() >= self.threshold

    def _emit_metrics(self) -> None:
        totals: Counter[CallLogEventType] = Counter()
        for subject, counts in self._counts.items():
            if subject.startswith("tool:"):
                # One EMF blob per tool, so ToolName labels exactly its own counts.
                metrics.add_dimension(name="ToolName", value=subject.removeprefix("tool:"))
                for event_type, count in counts.items():
                    metrics.add_metric(name=_METRIC_BY_EVENT[event_type], unit=MetricUnit.Count, value=count)
                metrics.flush_metrics()
            else:
                totals.update(counts)
        for event_type, count in totals.items():
            metrics.add_metric(name=_METRIC_BY_EVENT[event_type], unit=MetricUnit.Count, value=count)

    def _emit_function_metrics(self, function: str, stats: FunctionStats) -> None:
        metrics.add_dimension(name="FunctionName", value=function)
        metrics.add_metric(name="ReportedInvocations", unit=MetricUnit.Count, value=stats.invocations)
        metrics.add_metric(name="ColdStarts", unit=MetricUnit.Count, value=stats.cold_starts)
        metrics.add_metric(name="Timeouts", unit=MetricUnit.Count, value=stats.timeouts)
        metrics.add_metric(
            name="ColdStartRate", unit=MetricUnit.Percent, value=100 * stats.cold_starts / stats.invocations
        )
        metrics.add_metric(name="DurationP50", unit=MetricUnit.Milliseconds, value=stats.percentile(0.5))
        metrics.add_metric(name="DurationP99", unit=MetricUnit.Milliseconds, value=stats.percentile(0.99))
        metrics.add_metric(name="MemoryHeadroom", unit=MetricUnit.Percent, value=100 - stats.memory_percent)
        metrics.flush_metrics()

    def _alert_on_function(self, function: str, stats: FunctionStats) -> None:
        reasons = []
        if stats.timeouts >= self.timeout_threshold:
            reasons.append("timeout_burst")
        if stats.memory_percent >= self.memory_percent:
            reasons.append("memory_near_limit")
        if not reasons:
            return
        message = {
            "alert": reasons[0],
            "reasons": reasons,
            "environment": self.settings.environment,
            "function": function,
            "timeoutsInBatch": stats.timeouts,
            "timeoutThreshold": self.timeout_threshold,
            "maxMemoryUsedPercent": round(stats.memory_percent, 1),
            "memoryAlertPercent": self.memory_percent,
            "invocationsInBatch": stats.invocations,
        }
        self._publish(f"function:{function}", message, f"{', '.join(reasons)} in {function}")

    def _window(self, alert: str, subject: str) -> AlertDecision:
        """Send, or not (a window of `subject` is open: counted in it). When the table cannot be read the alert is
        sent with no suppressed count: a duplicate alert is better than a lost one."""
        try:
            decision = self.alert_windows.decide(alert, subject, time.time())
        except Exception as error:  # noqa: BLE001 - a duplicate alert is better than a lost one
            logger.warning("alert window unavailable", extra={"subject": subject, "error_type": type(error).__name__})
            metrics.add_metric(name="AlertWindowUnavailable", unit=MetricUnit.Count, value=1)
            return AlertDecision(True, None)
        if not decision.send:
            logger.info("alert suppressed", extra={"subject": subject, "alert": alert})
            metrics.add_metric(name="AlertsSuppressed", unit=MetricUnit.Count, value=1)
        return decision

    def _alert(self, subject: str, counts: Counter[CallLogEventType], latest: CallLogRecord) -> None:
        kind, _, name = subject.partition(":")
        drift = counts[CallLogEventType.SCHEMA_DRIFT] > 0
        change = next((str(event_type) for event_type in _ALWAYS_ALERTING if counts[event_type]), None)
        message: dict[str, Any] = {
            "alert": change or "error_threshold_crossed",
            "environment": self.settings.environment,
            kind: name,
            "errorsInBatch": counts.total(),
            "threshold": self.threshold,
            "byEventType": {str(event_type): count for event_type, count in sorted(counts.items())},
            "lastOccurredAt": latest.occurred_at.isoformat(),
        }
        if drift:
            message |= {"schemaHash": latest.schema_hash, "previousSchemaHash": latest.previous_schema_hash}
        headline = f"{counts.total()} errors of {kind} {name} in one batch"
        if change:
            headline = f"{change.replace('_', ' ')} on {name}"
        # An endpoint's alerts also count against its owner: one tenant's many endpoints alert once per window.
        owner = latest.user_id if kind == "server" else None
        self._publish(subject, message, headline, owner)

    def _publish(self, subject: str, message: dict[str, Any], headline: str, owner: str | None = None) -> None:
        decision = self._window(message["alert"], subject)
        if not decision.send:
            return
        message |= {
            "suppressedSinceLastAlert": decision.suppressed_before,
            "alertWindowSeconds": self.alert_windows.window_seconds,
        }
        if owner is not None:
            for_owner = self._window(message["alert"], f"owner:{owner}")
            if not for_owner.send:
                return
            # The owner is not named (an alert names what failed, never whose it is), only what it suppressed.
            message |= {"suppressedForOwnerSinceLastAlert": for_owner.suppressed_before}
        try:
            self._sns.publish(
                TopicArn=self.topic_arn,
                Subject=f"[{self.settings.environment}] MCP backend: {headline}"[:100],
                Message=json.dumps(message, sort_keys=True),
                MessageAttributes={"alert": {"DataType": "String", "StringValue": message["alert"]}},
            )
        except Exception as error:  # noqa: BLE001 - the records are counted; failing now would only re-skip them
            logger.error("alert not published", extra={"subject": subject, "error_type": type(error).__name__})
            metrics.add_metric(name="AlertPublishFailures", unit=MetricUnit.Count, value=1)
        else:
            logger.info("alert published", extra={"subject": subject, "alert": message["alert"]})
