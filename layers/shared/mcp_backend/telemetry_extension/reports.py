"""Platform telemetry folded into call-log records: one platform_report per invocation, carrying the
runtimeDone status and whether the invocation paid the environment's start (a cold start): its init, or with
SnapStart its restore from the snapshot (the report then has restoreDurationMs and no initDurationMs:
https://docs.aws.amazon.com/lambda/latest/dg/snapstart-monitoring.html)."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from mcp_backend.calllog.models import CallLogEventType, CallLogRecord


class ReportFolder:
    def __init__(self, function_name: str) -> None:
        self.function_name = function_name
        self.malformed = 0
        self._statuses: dict[str, str] = {}

    def fold(self, events: Any) -> list[CallLogRecord]:
        """Records for the platform.report events of one delivery; anything malformed is counted and skipped."""
        if not isinstance(events, list):
            self.malformed += 1
            return []
        records = []
        for event in events:
            try:
                record = self._fold_one(event)
            except (KeyError, TypeError, ValueError, ValidationError):
                self.malformed += 1
                continue
            if record is not None:
                records.append(record)
        return records

    def _fold_one(self, event: Any) -> CallLogRecord | None:
        kind, body = event["type"], event["record"]
        if kind == "platform.runtimeDone":
            self._statuses[str(body["requestId"])] = str(body["status"])
            return None
        if kind != "platform.report":
            return None
        request_id = str(body["requestId"])
        metrics = body["metrics"]
        init = metrics.get("initDurationMs")
        return CallLogRecord(
            event_type=CallLogEventType.PLATFORM_REPORT,
            occurred_at=event["time"],
            function_name=self.function_name,
            request_id=request_id,
            status=str(body.get("status") or self._statuses.pop(request_id, "success")),
            cold_start=init is not None or metrics.get("restoreDurationMs") is not None,
            init_duration_ms=init,
            duration_ms=metrics["durationMs"],
            billed_duration_ms=metrics["billedDurationMs"],
            max_memory_used_mb=metrics["maxMemoryUsedMB"],
            memory_size_mb=metrics["memorySizeMB"],
        )
