"""get_job, list_failed_jobs and cancel_job: the caller's jobs as the jobs service reads and cancels them."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from mcp_backend.jobs.models import JOB_ID_PATTERN, JobStatus
from mcp_backend.tools.context import ErrorDetail, StrictInput, ToolContext, ToolOutput


class GetJobInput(StrictInput):
    job_id: str = Field(pattern=JOB_ID_PATTERN)
    cursor: str | None = Field(None, max_length=512, description="nextCursor from the previous page")


class CancelJobInput(StrictInput):
    job_id: str = Field(pattern=JOB_ID_PATTERN)


class ListFailedJobsInput(StrictInput):
    limit: int = Field(10, ge=1, le=50)
    cursor: str | None = Field(None, max_length=512, description="nextCursor from the previous page")


class JobView(ToolOutput):
    """get_job: the job's state, and its result whole (`result`) or one page of its JSON text (`resultChunk`)."""

    jobId: str
    status: JobStatus
    tool: str | None
    createdAt: str | None = None
    updatedAt: str | None = None
    completedAt: str | None = None
    error: ErrorDetail | None = None
    progress: float | None = Field(None, description="Share of the work done (0 to 1), as its worker last recorded")
    progressMessage: str | None = Field(None, description="What the job did last")
    result: dict[str, Any] | None = Field(None, description="The tool's answer, when it fits one page")
    resultChunk: str | None = Field(None, description="A page of the result's JSON text; concatenate them in order")
    resultChars: int | None = Field(None, description="The length of the result's whole JSON text")
    nextCursor: str | None = Field(None, description="Pass back as cursor for the next page")


class FailedJob(ToolOutput):
    jobId: str
    messageId: str | None
    tool: str | None
    status: str
    error: ErrorDetail | None
    failedAt: str | None


class FailedJobs(ToolOutput):
    """list_failed_jobs: one page of the caller's failed jobs, newest first."""

    failedJobs: list[FailedJob]
    nextCursor: str | None = Field(None, description="Pass back as cursor for the next page")


class CancelledJob(ToolOutput):
    """cancel_job: the job, now CANCELLED."""

    jobId: str
    status: JobStatus


def get_job(request: GetJobInput, ctx: ToolContext) -> dict[str, Any]:
    return ctx.job_service().page(ctx.user_id, request.job_id, request.cursor)


def list_failed_jobs(request: ListFailedJobsInput, ctx: ToolContext) -> dict[str, Any]:
    return ctx.job_service().failed(ctx.user_id, request.limit, request.cursor)


def cancel_job(request: CancelJobInput, ctx: ToolContext) -> dict[str, Any]:
    return ctx.job_service().cancel(ctx.user_id, request.job_id)
