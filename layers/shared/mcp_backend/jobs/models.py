"""Payloads of the job pipeline."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

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

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)

    job_id: str = Field(pattern=JOB_ID_PATTERN)
    user_id: str = Field(min_length=1, max_length=128)
    tool: str = Field(min_length=1, max_length=64)
    input: dict[str, Any]
    submitted_at: datetime | None = None

    def body(self) -> str:
        return self.model_dump_json(by_alias=True, exclude_none=True)

    def attributes(self) -> dict[str, dict[str, str]]:
        """SQS message attributes: `jobType` (the tool) lets consumers route without parsing the body."""
        return {"jobType": {"DataType": "String", "StringValue": self.tool}}


class JobError(BaseModel):
    """What a failed job records: the error's type and a message that carries no payload."""

    type: str
    message: str
