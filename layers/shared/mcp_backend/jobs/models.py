"""Payloads of the job pipeline."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from mcp_backend.tracing.propagation import sqs_message_attributes

JOB_ID_PATTERN = r"^[A-Za-z0-9_-]{8,64}$"


class JobStatus(StrEnum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"  # by its owner (cancel_job, tasks/cancel); the worker never runs or completes it


# A job in one of these states never changes again (a cancel, a run or a result is refused).
TERMINAL_STATUSES = frozenset({JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED})


class JobMessage(BaseModel):
    """The body of one job-queue message (what submit_analysis enqueues)."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True, defer_build=True
    )

    job_id: str = Field(pattern=JOB_ID_PATTERN)
    user_id: str = Field(min_length=1, max_length=128)
    tool: str = Field(min_length=1, max_length=64)
    input: dict[str, Any]
    submitted_at: datetime | None = None

    def body(self) -> str:
        return self.model_dump_json(by_alias=True, exclude_none=True)

    def attributes(self) -> dict[str, dict[str, str]]:
        """SQS message attributes: `jobType` (the tool) lets consumers route without parsing the body; with
        tracing on, `traceparent` (and `tracestate`) carry the sender's span to the worker's."""
        return {"jobType": {"DataType": "String", "StringValue": self.tool}, **sqs_message_attributes()}

    def fingerprint(self) -> str:
        """What makes two messages the same job: owner, tool and input (not when it was submitted). Stored on
        the job at submit; a message whose fingerprint differs is refused, never run under that job's id."""
        canonical = json.dumps([self.user_id, self.tool, self.input], sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()


class JobRun(BaseModel):
    """One receive of a job's message: what the worker's run-once call is keyed on (the job's id) and
    validated against (its fingerprint)."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    job: JobMessage
    attempt: int = Field(ge=1)  # the message's ApproximateReceiveCount


class JobOutcome(BaseModel):
    """What one run of a job ends with: the result's JSON text inline or the key of the object holding it
    (SUCCEEDED), or nothing (CANCELLED while it ran). A repeated delivery gets the status alone."""

    model_config = ConfigDict(defer_build=True)  # built where jobs run or are read, not where modules load

    job_id: str
    status: JobStatus
    result_text: str | None = None
    result_key: str | None = None

    def summary(self) -> dict[str, str]:
        return {"jobId": self.job_id, "status": self.status.value}


class JobError(BaseModel):
    """What a failed job records: the error's type and a message that carries no payload."""

    model_config = ConfigDict(defer_build=True)

    type: str
    message: str
