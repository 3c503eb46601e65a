"""Puts call-log records on the stream with PutRecords: batched within the API's limits, entries
reported failed are retried with bounded backoff, and what is finally lost is logged (counts and
error codes, never payloads) and counted, so losing the call log never fails the caller's work."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from aws_lambda_powertools.metrics import MetricUnit

from mcp_backend.aws import botocore_errors, client_or_lazy
from mcp_backend.calllog.models import CallLogRecord
from mcp_backend.observability import logger, metrics

if TYPE_CHECKING:
    from mypy_boto3_kinesis import KinesisClient
    from mypy_boto3_kinesis.type_defs import PutRecordsRequestEntryTypeDef

# PutRecords limits: https://docs.aws.amazon.com/kinesis/latest/APIReference/API_PutRecords.html
MAX_RECORDS_PER_REQUEST = 500
MAX_BYTES_PER_REQUEST = 5 * 1024 * 1024
MAX_BYTES_PER_RECORD = 1024 * 1024  # data blob + partition key
# Request-level errors that retrying cannot fix.
_PERMANENT_ERRORS = frozenset(
    {
        "AccessDeniedException",
        "InvalidArgumentException",
        "ResourceNotFoundException",
        "ValidationException",
        "KMSAccessDeniedException",
        "KMSDisabledException",
        "KMSInvalidStateException",
        "KMSNotFoundException",
    }
)


class CallLogUnavailable(Exception):
    """Raised only by a writer built with raise_on_loss=True, after it gave up on some records."""


@dataclass
class PutOutcome:
    written: int = 0
    dropped: int = 0
    error_codes: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class _Entry:
    data: bytes
    partition_key: str

    @property
    def size(self) -> int:
        return len(self.data) + len(self.partition_key.encode())

    def request(self) -> PutRecordsRequestEntryTypeDef:
        return {"Data": self.data, "PartitionKey": self.partition_key}


class CallLogWriter:
    def __init__(
        self,
        stream_name: str,
        client: KinesisClient | None = None,
        *,
        max_attempts: int = 4,
        base_delay_seconds: float = 0.05,
        max_delay_seconds: float = 0.5,
        raise_on_loss: bool = False,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        client = client_or_lazy(client, "kinesis")
        self.stream_name = stream_name
        self.max_attempts = max_attempts
        self.base_delay_seconds = base_delay_seconds
        self.max_delay_seconds = max_delay_seconds
        self.raise_on_loss = raise_on_loss
        self._client = client
        self._sleep = sleep
        self._buffer: list[CallLogRecord] = []

    def add(self, record: CallLogRecord) -> None:
        """Buffer a record for the next flush (one PutRecords per batch of work, not per record)."""
        self._buffer.append(record)

    def flush(self) -> PutOutcome:
        records, self._buffer = self._buffer, []
        # Records added from concurrent threads: the stream keeps each caller's calls in the order they happened.
        return self.put(sorted(records, key=lambda record: record.occurred_at))

    def put(self, records: Iterable[CallLogRecord]) -> PutOutcome:
        outcome = PutOutcome()
        if not self.stream_name:  # the call log is off (CallLog Disabled): records are not kept, nor counted lost
            return outcome
        entries = []
        for record in records:
            entry = _Entry(record.data(), record.partition_key)
            if entry.size > MAX_BYTES_PER_RECORD:
                outcome.dropped += 1
                outcome.error_codes.add("RecordTooLarge")
            else:
                entries.append(entry)
        for chunk in _chunks(entries):
            try:
                self._put_chunk(chunk, outcome)
            except Exception as error:  # noqa: BLE001 - the call log must never fail the caller's work
                outcome.dropped += len(chunk)
                outcome.error_codes.add(type(error).__name__)
        if outcome.dropped:
            self._report_loss(outcome)
        return outcome

    # ------------------------------------------------------------------ internals
    def _put_chunk(self, chunk: list[_Entry], outcome: PutOutcome) -> None:
        pending = chunk
        for attempt in range(self.max_attempts):
            if attempt:
                self._sleep(self._backoff(attempt))
            try:
                response = self._client.put_records(
                    StreamName=self.stream_name, Records=[entry.request() for entry in pending]
                )
            except (botocore_errors.ClientError, botocore_errors.BotoCoreError) as error:
                code = (
                    error.response.get("Error", {}).get("Code", "")
                    if isinstance(error, botocore_errors.ClientError)
                    else ""
                )
                code = code or type(error).__name__
                outcome.error_codes.add(code)
                if code in _PERMANENT_ERRORS:
                    break
                continue
            results = response["Records"]
            failed = [entry for entry, result in zip(pending, results, strict=True) if result.get("ErrorCode")]
            outcome.error_codes.update(result["ErrorCode"] for result in results if result.get("ErrorCode"))
            outcome.written += len(pending) - len(failed)
            pending = failed
            if not pending:
                return
        outcome.dropped += len(pending)

    def _backoff(self, attempt: int) -> float:
        # Full jitter, capped: spreads retries of throttled writers without unbounded waits.
        return random.uniform(0, min(self.max_delay_seconds, self.base_delay_seconds * 2**attempt))  # noqa: S311

    def _report_loss(self, outcome: PutOutcome) -> None:
        logger.warning(
            "call-log records dropped",
            extra={
                "stream": self.stream_name,
                "dropped": outcome.dropped,
                "written": outcome.written,
                "error_codes": sorted(outcome.error_codes),
            },
        )
        metrics.add_metric(name="CallLogRecordsDropped", unit=MetricUnit.Count, value=outcome.dropped)
        if self.raise_on_loss:
            raise CallLogUnavailable(
                f"{outcome.dropped} call-log record(s) not written: {', '.join(sorted(outcome.error_codes))}"
            )


def _chunks(entries: list[_Entry]) -> Iterator[list[_Entry]]:
    chunk: list[_Entry] = []
    size = 0
    for entry in entries:
        if chunk and (len(chunk) == MAX_RECORDS_PER_REQUEST or size + entry.size > MAX_BYTES_PER_REQUEST):
            yield chunk
            chunk, size = [], 0
        chunk.append(entry)
        size += entry.size
    if chunk:
        yield chunk
