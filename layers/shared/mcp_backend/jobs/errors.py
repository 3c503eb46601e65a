"""Failures of the job pipeline itself (tool failures live in mcp_backend.tools.errors)."""

from __future__ import annotations


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
