"""What every record-batch handler does (SQS, Kinesis, DynamoDB Streams): check the source, run each
record through its consumer with Powertools Batch, and report failures as batchItemFailures."""

from __future__ import annotations

from typing import Any, Protocol

from aws_lambda_powertools.utilities.batch import BatchProcessor, process_partial_response


class BatchConsumer(Protocol):
    def start_invocation(self, lambda_context: Any) -> None: ...

    def process(self, record: Any) -> Any:
        """Record handler: returns on success, raises on any failure (never swallows one)."""

    def finish_invocation(self) -> None:
        """After the batch: work done once per batch (flushes, alerts); must not raise."""


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


class StreamBatchStuck(RuntimeError):
    """The first record of a stream batch failed: raised so Lambda bisects the batch.

    A partial batch response checkpoints at the first failed record, so when that is the batch's
    first record nothing moves, and after MaximumRetryAttempts the whole rest of the batch would go
    to OnFailure with it. Failing the invocation instead lets BisectBatchOnFunctionError split the
    batch until the poison record stands alone; the records that did succeed are redelivered and
    skipped by the sequence-number idempotency.
    """


_STREAM_SEQUENCE = {
    "aws:kinesis": lambda record: record["kinesis"]["sequenceNumber"],
    "aws:dynamodb": lambda record: record["dynamodb"]["SequenceNumber"],
}


def handle_batch(
    event: Any, context: Any, *, event_source: str, processor: BatchProcessor, consumer: BatchConsumer
) -> dict[str, Any]:
    require_batch_from(event, event_source)
    consumer.start_invocation(context)
    try:
        response = process_partial_response(
            event=event, record_handler=consumer.process, processor=processor, context=context
        )
    finally:
        consumer.finish_invocation()
    sequence_of = _STREAM_SEQUENCE.get(event_source)
    failed = {item["itemIdentifier"] for item in response.get("batchItemFailures", [])}
    if sequence_of is not None and len(event["Records"]) > 1 and sequence_of(event["Records"][0]) in failed:
        raise StreamBatchStuck(f"first of {len(event['Records'])} records failed; failing the batch to bisect it")
    return dict(response)
