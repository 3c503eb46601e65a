"""Typed tool failures: each maps to one client-facing error type with a message safe to return.

Messages name what failed and where (a redacted URL), never credentials or payload content.
"""

from __future__ import annotations


class ToolError(Exception):
    """Base of every expected tool failure; anything else is a bug."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    @property
    def error_type(self) -> str:
        return type(self).__name__


class InvalidToolInput(ToolError):
    """The arguments do not describe a request the tool can run."""


class UnsafeDatasetUrl(ToolError):
    """The URL's scheme or (resolved) host is not allowed by the fetch policy."""


class DatasetUnreachable(ToolError):
    """The dataset could not be fetched: DNS, connection, timeout, non-2xx status or S3 error."""


class DatasetTooLarge(ToolError):
    """The dataset exceeds the policy's byte cap."""


class DatasetUnparseable(ToolError):
    """The bytes are not UTF-8 CSV, JSON Lines or a JSON array of objects."""


class EndpointNotFound(ToolError):
    """No registered endpoint with this id belongs to the caller."""
