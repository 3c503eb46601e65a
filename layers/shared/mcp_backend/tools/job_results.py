"""get_job, list_failed_jobs and cancel_job: the caller's jobs as the jobs service reads and cancels them."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from mcp_backend.jobs.models import JOB_ID_PATTERN
from mcp_backend.tools.context import StrictInput, ToolContext


class GetJobInput(StrictInput):
    job_id: str = Field(pattern=JOB_ID_PATTERN)
    cursor: str | None = Field(None, max_length=512, description="nextCursor from the previous page")


class CancelJobInput(StrictInput):
    job_id: str = Field(pattern=JOB_ID_PATTERN)


class ListFailedJobsInput(StrictInput):
    limit: int = Field(10, ge=1, le=50)
    cursor: str | None = Field(None, max_length=512, description="nextCursor from the previous page")


def get_job(request: GetJobInput, ctx: ToolContext) -> dict[str, Any]:
    return ctx.job_service().page(ctx.user_id, request.job_id, request.cursor)


def list_failed_jobs(request: ListFailedJobsInput, ctx: ToolContext) -> dict[str, Any]:
    return ctx.job_service().failed(ctx.user_id, request.limit, request.cursor)


def cancel_job(request: CancelJobInput, ctx: ToolContext) -> dict[str, Any]:
    return ctx.job_service().cancel(ctx.user_id, request.job_id)
