"""Failures of the job pipeline itself and the job requests it refuses (tool failures live in
mcp_backend.tools.errors)."""

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


class JobRequestError(JobPipelineError):
    """A job request the service refuses; its text is safe to return to the caller."""


class JobNotFound(JobRequestError):
    """No job with this id belongs to the caller (someone else's job is indistinguishable from none)."""


class JobConflict(JobRequestError):
    """The job id is taken by another user's job."""


class InvalidCursor(JobRequestError):
    """The result cursor was not issued by this server for this job."""


class EnqueueFailed(JobRequestError):
    """The job was recorded but its message could not be sent; the same callId retries it."""
