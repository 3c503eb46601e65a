"""Failures of the job pipeline itself (tool failures live in mcp_backend.tools.errors)."""

from __future__ import annotations

from pydantic import ValidationError


class JobPipelineError(Exception):
    @property
    def error_type(self) -> str:
        return type(self).__name__


class MalformedJobMessage(JobPipelineError):
    """The message body is not a job: it fails alone and ends in the DLQ."""


class JobOwnershipError(JobPipelineError):
    """The job id belongs to another user; the existing job is left untouched."""


class UnknownTool(JobPipelineError):
    """The job names a tool the registry does not have."""


def describe_validation_error(error: ValidationError) -> str:
    """Field locations and messages only: pydantic's own text would echo the rejected input."""
    problems = [
        f"{'.'.join(str(part) for part in detail['loc']) or 'body'}: {detail['msg']}"
        for detail in error.errors(include_input=False, include_url=False)
    ]
    return "; ".join(problems[:5]) + (f" (+{len(problems) - 5} more)" if len(problems) > 5 else "")
