"""What one call-log record says. The producers (MCP endpoint, ToolWorker, drift detector, the
call-log-telemetry extension) and the CallLogAnalyzer share this model; the ESM filter on the stream
reads `eventType` from the same JSON."""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Self

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel


class CallLogEventType(StrEnum):
    TOOL_CALL = "tool_call"
    TOOL_ERROR = "tool_error"
    JOB_FAILED = "job_failed"
    # An endpoint's probes failed for the configured days and stopped (the analyzer alerts the operator).
    PROBES_STOPPED = "probes_stopped"
    SCHEMA_DRIFT = "schema_drift"
    # One per invocation, from Lambda's Telemetry API (platform.report), written by the extension.
    PLATFORM_REPORT = "platform_report"


# What the CallLogAnalyzer's FilterCriteria lets through (a test holds the template's filter to this).
ACTIONABLE = frozenset(
    {
        CallLogEventType.TOOL_ERROR,
        CallLogEventType.JOB_FAILED,
        CallLogEventType.SCHEMA_DRIFT,
        CallLogEventType.PROBES_STOPPED,
        CallLogEventType.PLATFORM_REPORT,
    }
)
# Read by no function of the stack: the usage record of every call, kept on the stream (24 h) for the readers
# docs/streams.md names (a test holds every produced type to the analyzer's filter or this set).
KEPT_FOR_STREAM_READERS = frozenset({CallLogEventType.TOOL_CALL})
# A failed probe is not a call-log event: it travels as the ProbeWorker's OnFailure envelope to the AlertHandler.
_PROBE_EVENTS = frozenset({CallLogEventType.SCHEMA_DRIFT, CallLogEventType.PROBES_STOPPED})


def _now() -> datetime:
    return datetime.now(UTC)


class CallLogRecord(BaseModel):
    """One event. No payloads: tool inputs and results never enter the log, only names and numbers."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, frozen=True, extra="ignore", defer_build=True
    )

    event_type: CallLogEventType
    occurred_at: datetime = Field(default_factory=_now)
    recorded_at: datetime = Field(default_factory=_now)
    user_id: str | None = Field(default=None, min_length=1, max_length=128)
    tool_name: str | None = Field(default=None, min_length=1, max_length=64)
    server_id: str | None = Field(default=None, min_length=1, max_length=128)
    job_id: str | None = Field(default=None, max_length=64)
    latency_ms: float | None = Field(default=None, ge=0)
    error_type: str | None = Field(default=None, max_length=128)
    schema_hash: str | None = Field(default=None, max_length=128)
    previous_schema_hash: str | None = Field(default=None, max_length=128)
    # platform_report: what Lambda measured for one invocation of one function.
    function_name: str | None = Field(default=None, min_length=1, max_length=140)
    request_id: str | None = Field(default=None, max_length=64)
    status: str | None = Field(default=None, max_length=32)  # success | error | failure | timeout
    cold_start: bool | None = None
    init_duration_ms: float | None = Field(default=None, ge=0)
    duration_ms: float | None = Field(default=None, ge=0)
    billed_duration_ms: int | None = Field(default=None, ge=0)
    max_memory_used_mb: int | None = Field(default=None, ge=0)
    memory_size_mb: int | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _has_a_subject(self) -> Self:
        if self.event_type is CallLogEventType.PLATFORM_REPORT:
            if not self.function_name:
                raise ValueError("platform_report records need functionName")
        elif self.event_type in _PROBE_EVENTS:
            if not self.server_id:
                raise ValueError(f"{self.event_type} records need serverId")
        elif not (self.tool_name and self.user_id):
            raise ValueError(f"{self.event_type} records need toolName and userId")
        return self

    @property
    def partition_key(self) -> str:
        """One caller's records share a shard and stay in order; probe records order per endpoint."""
        if self.event_type is CallLogEventType.PLATFORM_REPORT:
            return f"function#{self.function_name}"
        if self.event_type in _PROBE_EVENTS:
            return f"server#{self.server_id}"
        return f"user#{self.user_id}"

    @property
    def subject(self) -> str:
        """What an alert is about: the tool, the endpoint for probe records, the function for reports."""
        if self.event_type is CallLogEventType.PLATFORM_REPORT:
            return f"function:{self.function_name}"
        return f"tool:{self.tool_name}" if self.event_type not in _PROBE_EVENTS else f"server:{self.server_id}"

    def data(self) -> bytes:
        return self.model_dump_json(by_alias=True, exclude_none=True).encode()
