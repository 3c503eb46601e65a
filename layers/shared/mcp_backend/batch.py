"""Guards shared by the record-batch handlers (SQS now; Kinesis and DynamoDB Streams use the same)."""

from __future__ import annotations

from typing import Any


class UnexpectedEventSource(ValueError):
    """The handler was invoked with something other than the event source it is wired to."""


def require_batch_from(event: Any, event_source: str) -> None:
    """Fail fast, with a message naming what was expected and what came, before any record runs."""
    records = event.get("Records") if isinstance(event, dict) else None
    if not isinstance(records, list) or not records:
        shape = sorted(event)[:10] if isinstance(event, dict) else type(event).__name__
        raise UnexpectedEventSource(f"expected a batch event from {event_source} with Records; got {shape}")
    sources = {record.get("eventSource") if isinstance(record, dict) else None for record in records}
    if sources != {event_source}:
        raise UnexpectedEventSource(
            f"expected only {event_source} records; got eventSource values {sorted(map(str, sources))}"
        )
