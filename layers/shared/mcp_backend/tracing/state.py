"""The process's tracing state: the tracer while tracing is on, None while it is off (mcp_backend.tracing.setup
configures it once per process)."""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer

INSTRUMENTATION_NAME = "mcp-backend"


class Tracing:
    """The configured state: the tracer, or None while tracing is off."""

    def __init__(self) -> None:
        self.tracer: Tracer | None = None
        self.provider: Any = None
        self.exporter: Any = None  # the OtlpJsonExporter setup made, reset after a SnapStart restore
        self.configured = False
        self.lock = threading.Lock()


STATE = Tracing()


def _own_state_in_a_forked_child() -> None:
    """A forked child (mcp_backend.jobs.apart) keeps the tracer under a new lock (another thread may have held the
    parent's at the fork), and its exporter opens a connection of its own."""
    STATE.lock = threading.Lock()
    if STATE.exporter is not None:
        STATE.exporter.forked()


os.register_at_fork(after_in_child=_own_state_in_a_forked_child)


def enabled() -> bool:
    return STATE.tracer is not None
