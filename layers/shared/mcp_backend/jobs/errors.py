"""Failures of the job pipeline itself and the job requests it refuses (tool failures live in
mcp_backend.tools.errors)."""

from __future__ import annotations

from typing import ClassVar


class ReportedFailure(Exception):
    """A failure whose message is written to be shown to its caller and stored on its job (tool errors are
    these). Permanent unless `transient`: the same input fails the same way again."""

    transient: ClassVar[bool] = False

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    @property
    def error_type(self) -> str:
        return type(self).__name__


class WorkerTimeLimit(ReportedFailure):
    """The job would outlast the queued worker's invocation (its Timeout, at most Lambda's 900 s): it stops at a
    checkpoint while there is time left to record why. Permanent: the same job takes as long on every receive."""


class ToolOutOfMemory(ReportedFailure):
    """The job's tool used more memory than the function has: its process was killed (or its allocation
    refused), the job fails alone and is not retried (the same input would need the same memory)."""

    @classmethod
    def of_run(cls) -> ToolOutOfMemory:
        return cls("out of memory: the job's tool needed more memory than the worker function has")


class JobPipelineError(Exception):
    @property
    def error_type(self) -> str:
        return type(self).__name__


class MalformedJobMessage(JobPipelineError):
    """The message body is not a job: it fails alone and ends in the DLQ."""


class JobOwnershipError(JobPipelineError):
    """The job id belongs to another user; the existing job is left untouched."""


class JobPayloadMismatch(JobPipelineError):
    """A message names an existing job's id with another owner, tool or input (its fingerprint differs): it is
    never run under that id, the job is left untouched, and the message goes to the DLQ with this reason."""


class JobCancelled(JobPipelineError):
    """The job's owner cancelled it: it is not run, or its run stops at the next checkpoint, and its result
    is never recorded. Not a failure: the message is deleted, not retried or dead-lettered."""


class ResultTooLarge(JobPipelineError):
    """The result does not fit a JobTable item and no result bucket is configured: the same result would
    be refused on every retry, so the job fails at once."""


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


class JobAlreadyFinished(JobRequestError):
    """The job is already SUCCEEDED, FAILED or CANCELLED: it cannot be cancelled."""
