"""What Lambda records about one invocation: the REPORT line (billed duration, memory), the error document of a
timed-out invocation, and the status the Telemetry API gives a failed one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from devstack.runtime.function_errors import FunctionError


@dataclass
class Report:
    request_id: str
    duration_ms: float
    memory_mb: int
    max_memory_mb: int
    init_duration_ms: float | None

    @property
    def billed_ms(self) -> int:
        return math.ceil(self.duration_ms + (self.init_duration_ms or 0))

    def line(self) -> str:
        text = (
            f"REPORT RequestId: {self.request_id}\tDuration: {self.duration_ms:.2f} ms\t"
            f"Billed Duration: {self.billed_ms} ms\t"
            f"Memory Size: {self.memory_mb} MB\tMax Memory Used: {self.max_memory_mb} MB"
        )
        if self.init_duration_ms is not None:
            text += f"\tInit Duration: {self.init_duration_ms:.2f} ms"
        return text


def telemetry_status(error: FunctionError) -> str:
    """The Telemetry API status of a failed invocation."""
    return {"Sandbox.Timedout": "timeout", "Runtime.ExitError": "failure"}.get(error.error_type, "error")


def timeout_document(request_id: str, timeout: int) -> dict[str, Any]:
    """A timed-out invocation's error as Lambda reports it to Invoke and Destinations. The type and wording
    are as Lambda returns them; no documentation page spelling them out was found with the search tool."""
    return {
        "errorType": "Sandbox.Timedout",
        "errorMessage": f"RequestId: {request_id} Error: Task timed out after {timeout:.2f} seconds",
    }
