"""Which function the current thread or task runs for: the function's OpenTelemetry resource for the spans it
starts in this process (devstack.traces), where every in-process function shares one tracer provider.

A context variable, not a thread-local: the MCP app's requests run as tasks of one event loop, and work they
hand to threads (anyio's worker threads, the worker's record pool) runs in a copy of the caller's context.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from devstack.stack.resources import FunctionSpec

_RUNNING: ContextVar[FunctionSpec | None] = ContextVar("devstack_running_function", default=None)


@contextmanager
def running(spec: FunctionSpec) -> Iterator[None]:
    """Work inside the block (and what it starts in a copied context) is `spec`'s."""
    token = _RUNNING.set(spec)
    try:
        yield
    finally:
        _RUNNING.reset(token)


def running_function() -> FunctionSpec | None:
    return _RUNNING.get()


def resource_attributes(spec: FunctionSpec) -> dict[str, str]:
    """The function's OpenTelemetry resource: `service.name` its logical id (the name a developer reads in
    template.yaml), `faas.name` its function name and `cloud.resource_id` its ARN, as on AWS
    (https://opentelemetry.io/docs/specs/semconv/resource/faas/)."""
    return {"service.name": spec.logical_id, "faas.name": spec.name, "cloud.resource_id": spec.arn}
