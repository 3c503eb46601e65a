"""SQS event source mapping, as Lambda runs it.

https://docs.aws.amazon.com/lambda/latest/dg/with-sqs.html
- polls up to BatchSize messages, waiting up to MaximumBatchingWindowInSeconds to fill a batch;
  an idle queue is long-polled (ReceiveMessage WaitTimeSeconds 20, the maximum:
  https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/best-practices-setting-up-long-polling.html),
  so a poller waits in the queue for its next message instead of asking again and again;
- deletes messages that match no FilterCriteria pattern without invoking the function;
- an invocation that raises leaves the whole batch on the queue (visible again after the queue's
  visibility timeout); with ReportBatchItemFailures only the reported messages stay, and a
  malformed report counts as a failure of the whole batch;
- redrive to the DLQ after maxReceiveCount is SQS's own behaviour (moto implements it).
"""

from __future__ import annotations

import hashlib
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from devstack.runtime.function_errors import error_document, error_type
from devstack.sources.filters import RecordFilter

log = logging.getLogger("devstack.sqs")

MAX_RECEIVE = 10  # ReceiveMessage returns at most 10 messages per call
LONG_POLL_SECONDS = 20  # ReceiveMessage's longest WaitTimeSeconds


@dataclass
class BatchOutcome:
    received: int = 0
    filtered_out: int = 0
    invoked: bool = False
    failed_ids: tuple[str, ...] = ()
    error: str | None = None


class SqsEventSource:
    def __init__(
        self,
        mapping: dict[str, Any],
        queue_url: str,
        sqs_client: Any,
        invoke: Callable[[dict[str, Any]], Any],
        region: str,
    ) -> None:
        self.mapping = mapping
        self.queue_url = queue_url
        self.queue_arn = mapping["EventSourceArn"]
        self.sqs = sqs_client
        self.invoke = invoke
        self.region = region
        self.batch_size = int(mapping.get("BatchSize", 10))
        self.window = float(mapping.get("MaximumBatchingWindowInSeconds", 0))
        self.report_failures = "ReportBatchItemFailures" in mapping.get("FunctionResponseTypes", [])
        self.filter = RecordFilter(mapping.get("FilterCriteria"))
        self.enabled = mapping.get("Enabled", True) is not False

    def poll_once(self, wait: bool = False) -> BatchOutcome:
        """Receive one batch and deliver it. wait=True honours the batching window (long-running mode)."""
        return self.deliver(self.receive(wait))

    def receive(self, wait: bool = False, on_first: Callable[[], None] | None = None) -> list[dict[str, Any]]:
        """Without wait: what is visible now. With wait: long-poll for the first message (an empty list
        when a whole long poll passes without one), then keep gathering until the batch is full or
        MaximumBatchingWindowInSeconds has passed. on_first is called when the first messages arrive."""
        messages: list[dict[str, Any]] = []
        deadline: float | None = None
        while len(messages) < self.batch_size:
            wait_seconds = 0
            if wait:
                remaining = LONG_POLL_SECONDS if deadline is None else deadline - time.monotonic()
                if remaining <= 0:
                    break
                # WaitTimeSeconds is whole seconds: the window may close up to a second late.
                wait_seconds = min(LONG_POLL_SECONDS, math.ceil(remaining))
            received = self.sqs.receive_message(
                QueueUrl=self.queue_url,
                MaxNumberOfMessages=min(MAX_RECEIVE, self.batch_size - len(messages)),
                WaitTimeSeconds=wait_seconds,
                AttributeNames=["All"],
                MessageAttributeNames=["All"],
            ).get("Messages", [])
            messages.extend(received)
            if not received and (not wait or not messages):
                break
            if wait and deadline is None:
                deadline = time.monotonic() + self.window
                if on_first is not None:
                    on_first()
        return messages

    def deliver(self, messages: list[dict[str, Any]]) -> BatchOutcome:
        """Filter a received batch and invoke the function with what matches, as Lambda does."""
        outcome = BatchOutcome(received=len(messages))
        records = []
        for message in messages:
            record = self._record(message)
            if self.filter.matches(record):
                records.append(record)
            else:
                outcome.filtered_out += 1
                self._delete([message["ReceiptHandle"]])
        if not records:
            return outcome
        outcome.invoked = True
        try:
            response = self.invoke({"Records": records})
        except Exception as error:  # noqa: BLE001 - the whole batch returns to the queue, as on AWS
            outcome.error = f"{error_type(error)}: {error_document(error).get('errorMessage', '')}"
            outcome.failed_ids = tuple(r["messageId"] for r in records)
            log.warning("batch of %d failed as a whole: %s", len(records), outcome.error)
            return outcome
        failed = self._failed_ids(response, records)
        outcome.failed_ids = tuple(failed)
        self._delete([r["receiptHandle"] for r in records if r["messageId"] not in failed])
        return outcome

    def drain(self, max_batches: int = 100) -> list[BatchOutcome]:
        """Deliver batches until the queue has nothing visible (tests and `make invoke`)."""
        outcomes = []
        for _ in range(max_batches):
            outcome = self.poll_once()
            if not outcome.received:
                break
            outcomes.append(outcome)
        return outcomes

    # ------------------------------------------------------------------ internals
    def _record(self, message: dict[str, Any]) -> dict[str, Any]:
        return {
            "messageId": message["MessageId"],
            "receiptHandle": message["ReceiptHandle"],
            "body": message["Body"],
            "attributes": dict(message.get("Attributes", {})),
            "messageAttributes": {
                name: {
                    "stringValue": value.get("StringValue"),
                    "binaryValue": value.get("BinaryValue"),
                    "stringListValues": value.get("StringListValues", []),
                    "binaryListValues": value.get("BinaryListValues", []),
                    "dataType": value["DataType"],
                }
                for name, value in message.get("MessageAttributes", {}).items()
            },
            "md5OfBody": message.get("MD5OfBody") or hashlib.md5(message["Body"].encode()).hexdigest(),  # noqa: S324
            "eventSource": "aws:sqs",
            "eventSourceARN": self.queue_arn,
            "awsRegion": self.region,
        }

    def _failed_ids(self, response: Any, records: list[dict[str, Any]]) -> set[str]:
        if not self.report_failures:
            return set()
        ids = {r["messageId"] for r in records}
        items = response.get("batchItemFailures") if isinstance(response, dict) else None
        if items is None:
            return set()
        try:
            failed = {item["itemIdentifier"] for item in items}
        except (TypeError, KeyError):
            failed = set(ids)
        if not failed <= ids or "" in failed or None in failed:
            log.warning("invalid batchItemFailures report: the whole batch fails")
            return ids
        return failed

    def _delete(self, receipt_handles: list[str]) -> None:
        for start in range(0, len(receipt_handles), MAX_RECEIVE):
            chunk = receipt_handles[start : start + MAX_RECEIVE]
            self.sqs.delete_message_batch(
                QueueUrl=self.queue_url,
                Entries=[{"Id": str(i), "ReceiptHandle": handle} for i, handle in enumerate(chunk)],
            )
