"""What every record-batch handler does (SQS, Kinesis, DynamoDB Streams): check the source, run each
record through its consumer with Powertools Batch, and report failures as batchItemFailures."""

from __future__ import annotations

import asyncio
import contextvars
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from aws_lambda_powertools.utilities.batch import (
    AsyncBatchProcessor,
    BatchProcessor,
    async_process_partial_response,
    process_partial_response,
)


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


def _record_id(record: dict[str, Any]) -> str:
    """What Powertools reports as a record's itemIdentifier: SQS messageId, else its sequence number."""
    if "messageId" in record:
        return str(record["messageId"])
    return str(_STREAM_SEQUENCE[record["eventSource"]](record))


_STREAM_SEQUENCE = {
    "aws:kinesis": lambda record: record["kinesis"]["sequenceNumber"],
    "aws:dynamodb": lambda record: record["dynamodb"]["SequenceNumber"],
}


class RecordThreads:
    """The async record handler AsyncBatchProcessor awaits: runs a blocking record handler in a pool of
    `concurrency` threads, so a batch's records wait on I/O together, at most `concurrency` at a time.

    Each record runs in a copy of the invoking context: Powertools' thread-safe log keys are context
    variables, so one record's keys never show on another's lines. The pool lives as long as the
    execution environment (threads are frozen between invocations, as the environment is).
    """

    def __init__(self, process: Any, concurrency: int) -> None:
        self._process = process
        self._pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="record")

    async def __call__(self, record: Any) -> Any:
        context = contextvars.copy_context()
        return await asyncio.get_running_loop().run_in_executor(self._pool, context.run, self._process, record)


def handle_batch(
    event: Any,
    context: Any,
    *,
    event_source: str,
    processor: BatchProcessor | AsyncBatchProcessor,
    consumer: BatchConsumer,
    record_threads: RecordThreads | None = None,
) -> dict[str, Any]:
    """With an AsyncBatchProcessor, `record_threads` (running `consumer.process`) handles each record;
    failures are reported the same way in both modes."""
    require_batch_from(event, event_source)
    consumer.start_invocation(context)
    try:
        if isinstance(processor, AsyncBatchProcessor):
            if record_threads is None:
                raise ValueError("an AsyncBatchProcessor needs record_threads")
            response = async_process_partial_response(
                event=event, record_handler=record_threads, processor=processor, context=context
            )
        else:
            response = process_partial_response(
                event=event, record_handler=consumer.process, processor=processor, context=context
            )
    finally:
        consumer.finish_invocation()
    # Records finish in any order when they run at once; the report lists them in the batch's order.
    position = {_record_id(record): index for index, record in enumerate(event["Records"])}
    response["batchItemFailures"] = sorted(
        response.get("batchItemFailures", []), key=lambda item: position.get(str(item["itemIdentifier"]), len(position))
    )
    sequence_of = _STREAM_SEQUENCE.get(event_source)
    failed = {item["itemIdentifier"] for item in response.get("batchItemFailures", [])}
    if sequence_of is not None and len(event["Records"]) > 1 and sequence_of(event["Records"][0]) in failed:
        raise StreamBatchStuck(f"first of {len(event['Records'])} records failed; failing the batch to bisect it")
    return dict(response)
