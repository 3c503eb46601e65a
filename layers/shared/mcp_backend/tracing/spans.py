"""Spans around blocks of work, and attributes and links on the current one. With tracing off, every call costs
nothing: `span()` hands back NO_SPAN."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any, Literal

from mcp_backend.tracing.attributes import safe_attributes
from mcp_backend.tracing.state import STATE

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Tracer

SpanKindName = Literal["internal", "server", "client", "producer", "consumer"]


class _NoSpan:
    """What `span()` yields with tracing off: every call does nothing. One instance serves every caller."""

    def __enter__(self) -> _NoSpan:
        return self

    def __exit__(self, *_: object) -> None:
        return None

    def set_attribute(self, key: str, value: Any) -> None:
        return None

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        return None

    def record_error(self, error_type: str) -> None:
        return None

    @property
    def recording(self) -> bool:
        return False


NO_SPAN = _NoSpan()


def annotate(attributes: Mapping[str, Any]) -> None:
    """Attributes on the current span (the request's principal tier, a job's id), when one is recording."""
    if STATE.tracer is None:
        return
    from opentelemetry.trace import get_current_span

    current = get_current_span()
    if current.is_recording():
        current.set_attributes(safe_attributes(attributes))


def link_with_current(other: Any) -> None:
    """Link the current span and `other` (a span handle) both ways when they are in different traces: the SDK's
    MCP span follows a `traceparent` in `params._meta`, while the HTTP request's span, opened before the body is
    read, follows the header's (or starts a trace). Each trace then names the other."""
    if STATE.tracer is None or not isinstance(other, SpanHandle):
        return
    from opentelemetry.trace import get_current_span

    current = get_current_span()
    theirs, ours = current.get_span_context(), other.context
    if current.is_recording() and theirs.is_valid and theirs.trace_id != ours.trace_id:
        current.add_link(ours)
        other.link(theirs)


def span(
    name: str,
    *,
    kind: SpanKindName = "internal",
    attributes: Mapping[str, Any] | None = None,
    parent: Context | None = None,
    links: Sequence[Context] = (),
) -> AbstractContextManager[Any]:
    """A span around a block, current inside it (its child spans and the context a message carries are its).
    `parent`: a context extracted from a carrier, else the current span is the parent. With tracing off, NO_SPAN."""
    tracer = STATE.tracer
    if tracer is None:
        return NO_SPAN
    if parent is None and not links and _inside_an_unsampled_trace():
        # The sampler follows the parent (ParentBased): no span under an unsampled one is ever recorded. Starting
        # none costs nothing, and the parent stays current, so the trace and its not-sampled flag still travel on.
        return NO_SPAN
    return _recorded_span(tracer, name, kind, attributes, parent, links)


def _inside_an_unsampled_trace() -> bool:
    from opentelemetry.trace import get_current_span

    current = get_current_span().get_span_context()
    return current.is_valid and not current.trace_flags.sampled


@contextmanager
def _recorded_span(
    tracer: Tracer,
    name: str,
    kind: SpanKindName,
    attributes: Mapping[str, Any] | None,
    parent: Context | None,
    links: Sequence[Context],
) -> Iterator[Any]:
    from opentelemetry.trace import Link, SpanKind, get_current_span

    span_links = [Link(get_current_span(link).get_span_context()) for link in links]
    with tracer.start_as_current_span(
        name,
        context=parent,
        kind=SpanKind[kind.upper()],
        attributes=safe_attributes(attributes or {}),
        links=span_links,
        record_exception=False,  # an exception's text may quote a payload: its type is recorded instead
    ) as recorded:
        try:
            yield SpanHandle(recorded)
        except BaseException as error:
            SpanHandle(recorded).record_error(type(error).__name__)
            raise


class SpanHandle:
    """A recording span seen through `safe_attributes`."""

    def __init__(self, span: Any) -> None:
        self._span = span

    def set_attribute(self, key: str, value: Any) -> None:
        if self._span.is_recording():  # an unsampled span keeps nothing: nothing to clean
            self._span.set_attributes(safe_attributes({key: value}))

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        if self._span.is_recording():
            self._span.set_attributes(safe_attributes(attributes))

    @property
    def recording(self) -> bool:
        """False for a span the sampler dropped: nothing of it is exported."""
        return bool(self._span.is_recording())

    @property
    def context(self) -> Any:
        return self._span.get_span_context()

    def link(self, context: Any) -> None:
        if self._span.is_recording():
            self._span.add_link(context)

    def record_error(self, error_type: str) -> None:
        from opentelemetry.trace import StatusCode

        self._span.set_attribute("error.type", error_type)
        self._span.set_status(StatusCode.ERROR)
