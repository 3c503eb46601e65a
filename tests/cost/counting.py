"""Every AWS request made in this process, counted by who made it, and every Lambda invocation with its duration.

The functions build their own boto3 clients (at import, lazily, in worker threads), so the count is taken where
every client's call passes: botocore's `BaseClient._make_api_call`. The clients the local stack builds to play the
AWS services themselves (event-source pollers, destinations, TTL sweeps) are marked as platform clients: of their
requests only those AWS bills the account for are kept (`billed_platform_request`).
"""

from __future__ import annotations

import contextlib
import time
import weakref
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

from botocore.client import BaseClient

from devstack.runtime.in_process import FunctionRuntime

# Queues the local stack adds to emulate SNS -> Lambda and rule -> Lambda deliveries: not the account's queues.
TAP_QUEUE_MARK = "devstack-tap-"
# What an SQS event source mapping, a destination or a schedule target sends on the account's behalf, and AWS
# bills as that service's requests (Lambda's stream reads and DynamoDB's TTL deletes are not billed per request).
_BILLED_PLATFORM_OPERATIONS = {
    "sqs": {"ReceiveMessage", "DeleteMessage", "DeleteMessageBatch", "SendMessage", "ChangeMessageVisibilityBatch"},
    "sns": {"Publish"},
    "events": {"PutEvents"},
}
# DynamoDB's writes of one item each (a refused conditional write writes nothing: it raises, and is not counted).
_SINGLE_ITEM_WRITES = {"PutItem", "UpdateItem", "DeleteItem"}
# Operations whose request carries several records, each billed on its own (Kinesis rounds each record up to 1 KB).
_RECORD_LISTS = {("kinesis", "PutRecords"): "Records"}


@dataclass
class RequestLog:
    """What one unit of work sent to AWS: requests as `service:Operation`, records put, invocations, durations."""

    requests: Counter[str] = field(default_factory=Counter)
    dynamodb_batch_items: int = 0  # items written by BatchWriteItem: each one is a write request unit
    dynamodb_transaction_items: int = 0  # items of TransactWriteItems calls: each one is two write request units
    dynamodb_items_written: int = 0  # table items written by successful requests (a ConditionCheck writes none)
    dynamodb_write_units: int = 0  # their write request units (items under 1 KB): two per transaction item
    dynamodb_items_by_table: Counter[str] = field(default_factory=Counter)  # items written, by table name
    kinesis_bytes_read: int = 0  # what event source mappings read from Kinesis: on-demand bills data out per GB
    kinesis_records: int = 0
    kinesis_bytes: int = 0
    invocations: Counter[str] = field(default_factory=Counter)
    durations: dict[str, list[float]] = field(default_factory=dict)

    def add_invocation(self, function: str, seconds: float) -> None:
        self.invocations[function] += 1
        self.durations.setdefault(function, []).append(seconds)


# The endpoint's rate-limit leases (mcp_backend.request_rate): one UpdateItem per block of a principal's requests,
# counted apart from other UpdateItems because how many a unit makes depends on where it falls in a block.
RATE_LIMIT_LEASE = "dynamodb:UpdateItem (rate-limit lease)"
# The endpoint's daily-job leases (mcp_backend.jobs.quota_leases): one UpdateItem of JobTable per block of a
# caller's jobs, counted apart for the same reason.
DAILY_JOB_LEASE = "dynamodb:UpdateItem (daily-job lease)"


def request_key(service: str, operation: str, params: dict[str, Any]) -> str:
    if (service, operation) == ("dynamodb", "UpdateItem") and "RateLimitTable" in str(params.get("TableName")):
        return RATE_LIMIT_LEASE
    if (service, operation) == ("dynamodb", "UpdateItem") and str(
        params.get("Key", {}).get("jobId", {}).get("S", "")
    ).startswith("daily#"):
        return DAILY_JOB_LEASE
    return f"{service}:{operation}"


def count_dynamodb_writes(log: RequestLog, operation: str, params: dict[str, Any]) -> None:
    """Items a successful DynamoDB request wrote, and their write units (table writes only: an index's own
    writes are not visible here; docs/cost.md states them)."""
    if operation in _SINGLE_ITEM_WRITES:
        log.dynamodb_items_written += 1
        log.dynamodb_write_units += 1
        log.dynamodb_items_by_table[str(params.get("TableName"))] += 1
    elif operation == "BatchWriteItem":
        items = sum(len(items) for items in params.get("RequestItems", {}).values())
        log.dynamodb_batch_items += items
        log.dynamodb_items_written += items
        log.dynamodb_write_units += items
    elif operation == "TransactWriteItems":
        actions = params.get("TransactItems", [])
        log.dynamodb_transaction_items += len(actions)
        log.dynamodb_items_written += sum(1 for action in actions if "ConditionCheck" not in action)
        log.dynamodb_write_units += 2 * len(actions)


def billed_platform_request(service: str, operation: str, params: dict[str, Any], response: Any) -> bool:
    if operation not in _BILLED_PLATFORM_OPERATIONS.get(service, set()):
        return False
    if TAP_QUEUE_MARK in str(params.get("QueueUrl", "")):
        return False
    # A long poll that ends empty is billed too, but it is idle cost, counted per hour, not per unit.
    return not (operation == "ReceiveMessage" and not (response or {}).get("Messages"))


class RequestCounter:
    def __init__(self) -> None:
        self.log = RequestLog()
        self._platform_clients: weakref.WeakSet[BaseClient] = weakref.WeakSet()

    def platform(self, client: Any) -> Any:
        """Mark a client the local stack uses to play an AWS service."""
        self._platform_clients.add(client)
        return client

    def reset(self) -> RequestLog:
        """The log so far, and a fresh one from now on."""
        log, self.log = self.log, RequestLog()
        return log

    @contextlib.contextmanager
    def counting(self) -> Iterator[RequestCounter]:
        counter = self
        make_api_call = BaseClient._make_api_call
        invoke = FunctionRuntime.invoke

        def counted_call(client: BaseClient, operation: str, params: dict[str, Any]) -> Any:
            response = make_api_call(client, operation, params)
            service = client.meta.service_model.service_name
            if client in counter._platform_clients:
                if (service, operation) == ("kinesis", "GetRecords"):
                    counter.log.kinesis_bytes_read += sum(len(r["Data"]) for r in response.get("Records", []))
                if not billed_platform_request(service, operation, params, response):
                    return response
            counter.log.requests[request_key(service, operation, params)] += 1
            if (service, operation) in _RECORD_LISTS:
                records = params.get(_RECORD_LISTS[service, operation], [])
                counter.log.kinesis_records += len(records)
                counter.log.kinesis_bytes += sum(len(r.get("Data", b"")) + len(r["PartitionKey"]) for r in records)
            if service == "dynamodb":
                count_dynamodb_writes(counter.log, operation, params)
            return response

        def counted_invoke(runtime: FunctionRuntime, event: Any) -> Any:
            started = time.perf_counter()
            try:
                return invoke(runtime, event)
            finally:
                counter.log.add_invocation(runtime.spec.logical_id, time.perf_counter() - started)

        with (
            mock.patch.object(BaseClient, "_make_api_call", counted_call),
            mock.patch.object(FunctionRuntime, "invoke", counted_invoke),
        ):
            yield self
