"""Typed tool failures: each maps to one client-facing error type with a message safe to return.

Messages name what failed and where (a redacted URL), never credentials or payload content.

A failure is permanent unless its type says otherwise: the same input fails the same way again
(bad arguments, unparseable data, a refused or missing URL, HTTP 4xx), so the job worker fails the
job at once. A `TransientToolError` (throttling, HTTP 5xx, timeouts, a dropped connection) may
succeed later: the worker leaves its message to the queue's retries.
"""

from __future__ import annotations

from typing import ClassVar

from mcp_backend.jobs.errors import ReportedFailure


class ToolError(ReportedFailure):
    """Base of every expected tool failure; anything else is a bug."""


class InvalidToolInput(ToolError):
    """The arguments do not describe a request the tool can run."""


class CannotAsk(ToolError):
    """The tool needs its user's answer and cannot have it: the client cannot be asked, or did not answer."""


class UnsafeDatasetUrl(ToolError):
    """The URL's scheme or (resolved) host is not allowed by the fetch policy."""


class DatasetAccessDenied(ToolError):
    """An s3:// dataset outside the caller's own prefix and the operator's shared prefixes."""


class DatasetUnreachable(ToolError):
    """The dataset could not be fetched and will not be on a retry: an unresolvable host, a refused
    connection, HTTP 4xx, a missing or forbidden S3 object."""


class TransientToolError(ToolError):
    """A failure that may not happen again: retrying the same input can succeed."""

    transient: ClassVar[bool] = True


class DatasetTemporarilyUnreachable(DatasetUnreachable, TransientToolError):
    """The dataset's source may answer later: a timeout, a dropped connection, HTTP 408/429/5xx, S3
    throttling or an S3 service error."""


class DatasetTooLarge(ToolError):
    """The dataset exceeds the policy's byte cap."""


class DatasetCompressed(ToolError):
    """The source answered with a Content-Encoding other than identity: a small body could inflate far past
    the byte cap, so it is refused rather than decoded."""


class DatasetUnparseable(ToolError):
    """The bytes are not UTF-8 CSV, JSON Lines or a JSON array of objects."""


class DatasetOverBudget(ToolError):
    """Analysing the dataset would take more memory than its budget: a row longer than the budget allows, or more
    columns than a result may hold. Refused as soon as it is seen, before the memory is spent."""


class CallDeadlineExceeded(ToolError):
    """A synchronous call passed its deadline: it is stopped and answered, so it never holds the endpoint until
    the function's timeout. The same call as a job has the worker's time."""


class EndpointNotFound(ToolError):
    """No registered endpoint with this id belongs to the caller."""


class EndpointTokensUnavailable(ToolError):
    """A token was given, but this deployment has no key to encrypt it with: it is refused, not stored."""
