"""How a failed invocation is reported, whichever runtime ran it: Lambda's error document
(errorMessage, errorType, stackTrace) as Invoke, Destinations and event source mappings see it."""

from __future__ import annotations

import traceback
from typing import Any


class FunctionError(Exception):
    """An invocation that ended in a function error, carrying the document the runtime reported."""

    def __init__(self, document: dict[str, Any]) -> None:
        self.document = document
        super().__init__(document.get("errorMessage", ""))

    @property
    def error_type(self) -> str:
        return str(self.document.get("errorType", "Unhandled"))

    def __str__(self) -> str:
        return f"{self.error_type}: {self.document.get('errorMessage', '')}"


def error_document(error: BaseException) -> dict[str, Any]:
    """The error document of a failed invocation (an in-process exception gets the shape the RIC gives it)."""
    if isinstance(error, FunctionError):
        return error.document
    return {
        "errorMessage": str(error),
        "errorType": type(error).__name__,
        "stackTrace": traceback.format_exception(error)[-3:],
    }


def error_type(error: BaseException) -> str:
    return str(error_document(error).get("errorType", type(error).__name__))
