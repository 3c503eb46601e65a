"""The stack's own URLs as its functions read them: an SSM parameter the template writes (a Function URL, which
the function it belongs to cannot be told: naming it would be a dependency cycle), read once per instance.
The Host header of a request never stands in for one."""

from __future__ import annotations

import threading
from typing import Any

from mcp_backend.aws import botocore_errors, client_or_lazy
from mcp_backend.observability import logger


class StackUrlUnavailable(Exception):
    """The parameter could not be read (logged by its error type only); the next read tries again."""


class StackUrl:
    def __init__(self, parameter: str, ssm: Any = None) -> None:
        self.parameter = parameter
        self.ssm = client_or_lazy(ssm, "ssm")
        self._value: str | None = None
        self._lock = threading.Lock()

    @property
    def cached(self) -> str | None:
        """The value once read (callers on an event loop read it first, and call `value` off the loop)."""
        return self._value

    def value(self) -> str:
        with self._lock:
            if self._value is None:
                try:
                    answer = self.ssm.get_parameter(Name=self.parameter)
                except (botocore_errors.ClientError, botocore_errors.BotoCoreError) as error:
                    logger.error("stack URL unreadable", extra={"error_type": type(error).__name__})
                    raise StackUrlUnavailable(self.parameter) from None
                self._value = str(answer["Parameter"]["Value"])
            return self._value
