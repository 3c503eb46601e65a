"""Kinesis and DynamoDB Streams event source mappings, as Lambda runs them.

https://docs.aws.amazon.com/lambda/latest/dg/with-kinesis.html
https://docs.aws.amazon.com/lambda/latest/dg/with-ddb.html
https://docs.aws.amazon.com/lambda/latest/dg/kinesis-on-failure-destination.html

Per shard, in order:
- records start at StartingPosition (TRIM_HORIZON, LATEST or AT_TIMESTAMP) and come in batches of up
  to BatchSize; records that match no FilterCriteria pattern are skipped (the checkpoint passes them);
- records older than MaximumRecordAgeInSeconds are discarded to the OnFailure destination
  (condition RecordAgeExceeded, no responseContext: they were never invoked);
- an invocation error retries the batch; with BisectBatchOnFunctionError the batch is split in two
  first, and splitting does not consume the retry quota; after MaximumRetryAttempts retries the
  batch is discarded to OnFailure (condition RetryAttemptsExhausted);
- with ReportBatchItemFailures the checkpoint moves to the first reported sequence number and the
  retry starts there; a report naming no record of the batch fails the whole batch;
- retries happen at once here (Lambda backs off); the order and the counts are what AWS shows.
"""

from __future__ import annotations

import base64
import datetime as dt
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from devstack.front_doors.destinations import Destinations
from devstack.runtime.function_errors import error_type
from devstack.sources.filters import RecordFilter

log = logging.getLogger("devstack.streams")


@dataclass
class StreamRecord:
    sequence_number: str
    arrival: dt.datetime
    event_record: dict[str, Any]  # the record as the function receives it


@dataclass
class ShardState:
    shard_id: str
    iterator: str | None = None
    pending: list[StreamRecord] = field(default_factory=list)  # fetched, not yet checkpointed
    exhausted: bool = False


@dataclass
class StreamOutcome:
    invocations: int = 0
    delivered: int = 0
    filtered_out: int = 0
    discarded: list[dict[str, Any]] = field(default_factory=list)  # OnFailure records sent


class StreamEventSource:
    """Shared shard walk, batching, retry, bisect and OnFailure logic; subclasses read the stream."""

    batch_info_key = ""

    def __init__(
        self,
        mapping: dict[str, Any],
        function_arn: str,
        invoke: Callable[[dict[str, Any]], Any],
        destinations: Destinations,
        region: str,
        clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
    ) -> None:
        self.mapping = mapping
        self.stream_arn = mapping["EventSourceArn"]
        self.function_arn = function_arn
        self.invoke = invoke
        self.destinations = destinations
        self.region = region
        self.clock = clock
        self.batch_size = int(mapping.get("BatchSize", 100))
        self.bisect = bool(mapping.get("BisectBatchOnFunctionError", False))
        self.max_retries = int(mapping.get("MaximumRetryAttempts", -1))
        self.max_age = int(mapping.get("MaximumRecordAgeInSeconds", -1))
        self.report_failures = "ReportBatchItemFailures" in mapping.get("FunctionResponseTypes", [])
        self.on_failure = mapping.get("DestinationConfig", {}).get("OnFailure", {}).get("Destination")
        self.filter = RecordFilter(mapping.get("FilterCriteria"))
        self.starting_position = mapping.get("StartingPosition", "LATEST")
        self.starting_timestamp = mapping.get("StartingPositionTimestamp")
        self.shards: dict[str, ShardState] = {}

    # ------------------------------------------------------------------ subclass hooks
    def list_shards(self) -> list[str]:
        raise NotImplementedError

    def shard_iterator(self, shard_id: str) -> str:
        raise NotImplementedError

    def read(self, shard_id: str, iterator: str) -> tuple[list[StreamRecord], str | None]:
        raise NotImplementedError

    # ------------------------------------------------------------------ polling
    def start(self) -> None:
        """Take the starting position on every shard (LATEST means: records put from now on)."""
        for shard_id in self.list_shards():
            if shard_id not in self.shards:
                self.shards[shard_id] = ShardState(shard_id, iterator=self.shard_iterator(shard_id))

    def poll_once(self) -> StreamOutcome:
        """Read every shard once and process what is there, batch by batch, to the end."""
        self.start()
        outcome = StreamOutcome()
        for shard in self.shards.values():
            self._fill(shard)
            while shard.pending:
                batch = self._next_batch(shard, outcome)
                if batch:
                    self._process(shard, batch, outcome)
                self._fill(shard)
        return outcome

    def _fill(self, shard: ShardState) -> None:
        while shard.iterator and len(shard.pending) < self.batch_size:
            records, shard.iterator = self.read(shard.shard_id, shard.iterator)
            if not records:
                break
            shard.pending.extend(records)

    def _next_batch(self, shard: ShardState, outcome: StreamOutcome) -> list[StreamRecord]:
        """Up to BatchSize records that pass the filter; expired ones go to OnFailure first."""
        expired = [r for r in shard.pending[: self.batch_size] if self._too_old(r)]
        if expired:
            # Age is checked in order: everything up to the last expired record is discarded.
            cut = shard.pending.index(expired[-1]) + 1
            self._discard(shard, shard.pending[:cut], "RecordAgeExceeded", None, 0, outcome)
            del shard.pending[:cut]
            return []
        batch: list[StreamRecord] = []
        while shard.pending and len(batch) < self.batch_size:
            record = shard.pending.pop(0)
            if self.filter.matches(record.event_record):
                batch.append(record)
            else:
                outcome.filtered_out += 1
        return batch

    def _too_old(self, record: StreamRecord) -> bool:
        return self.max_age >= 0 and (self.clock() - record.arrival).total_seconds() > self.max_age

    def _process(self, shard: ShardState, batch: list[StreamRecord], outcome: StreamOutcome) -> None:
        """Deliver a batch until it succeeds or is discarded; bisected halves run in order."""
        work: list[tuple[list[StreamRecord], int]] = [(batch, 0)]  # (records, retries used)
        while work:
            records, retries = work.pop(0)
            attempts = retries + 1
            outcome.invocations += 1
            try:
                response = self.invoke({"Records": [r.event_record for r in records]})
            except Exception as error:  # noqa: BLE001 - a function error, as Lambda sees it
                log.warning("%s: batch of %d failed: %s", self.stream_arn, len(records), error_type(error))
                if self.bisect and len(records) > 1:
                    middle = len(records) // 2
                    work[:0] = [(records[:middle], retries), (records[middle:], retries)]
                elif self.max_retries >= 0 and retries >= self.max_retries:
                    self._discard(shard, records, "RetryAttemptsExhausted", "Unhandled", attempts, outcome)
                else:
                    work.insert(0, (records, retries + 1))
                continue
            failed_at = self._first_failure(response, records)
            if failed_at is None:
                outcome.delivered += len(records)
                continue
            outcome.delivered += failed_at
            rest = records[failed_at:]
            if self.max_retries >= 0 and retries >= self.max_retries:
                self._discard(shard, rest, "RetryAttemptsExhausted", None, attempts, outcome)
            else:
                work.insert(0, (rest, retries + 1))

    def _first_failure(self, response: Any, records: list[StreamRecord]) -> int | None:
        """Index of the first record to retry, or None when the batch succeeded."""
        if not self.report_failures or not isinstance(response, dict):
            return None
        items = response.get("batchItemFailures")
        if not items:
            return None
        positions = {r.sequence_number: i for i, r in enumerate(records)}
        try:
            reported = [positions[item["itemIdentifier"]] for item in items]
        except (KeyError, TypeError):
            return 0  # an identifier that is not in the batch: the whole batch is retried
        return min(reported)

    def _discard(
        self,
        shard: ShardState,
        records: list[StreamRecord],
        condition: str,
        function_error: str | None,
        attempts: int,
        outcome: StreamOutcome,
    ) -> None:
        if not records:
            return
        failure: dict[str, Any] = {
            "requestContext": {
                "requestId": str(uuid.uuid4()),
                "functionArn": self.function_arn,
                "condition": condition,
                "approximateInvokeCount": attempts,
            },
            "version": "1.0",
            "timestamp": _iso(self.clock()),
            self.batch_info_key: {
                "shardId": shard.shard_id,
                "startSequenceNumber": records[0].sequence_number,
                "endSequenceNumber": records[-1].sequence_number,
                "approximateArrivalOfFirstRecord": _iso(records[0].arrival),
                "approximateArrivalOfLastRecord": _iso(records[-1].arrival),
                "batchSize": len(records),
                "streamArn": self.stream_arn,
            },
        }
        if attempts:
            failure["responseContext"] = {"statusCode": 200, "executedVersion": "$LATEST"}
            if function_error:
                failure["responseContext"]["functionError"] = function_error
        outcome.discarded.append(failure)
        log.warning("%s: %d records discarded (%s)", self.stream_arn, len(records), condition)
        if self.on_failure:
            self.destinations.deliver(self.on_failure, failure)


class KinesisEventSource(StreamEventSource):
    batch_info_key = "KinesisBatchInfo"

    def __init__(self, *args: Any, kinesis_client: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.kinesis = kinesis_client

    @property
    def stream_name(self) -> str:
        return self.stream_arn.split(":stream/", 1)[1]

    def list_shards(self) -> list[str]:
        shards = self.kinesis.list_shards(StreamName=self.stream_name)["Shards"]
        return [shard["ShardId"] for shard in shards]

    def shard_iterator(self, shard_id: str) -> str:
        # By name: moto builds iterators from StreamName, not StreamARN.
        request: dict[str, Any] = {"StreamName": self.stream_name, "ShardId": shard_id}
        request["ShardIteratorType"] = self.starting_position
        if self.starting_position == "AT_TIMESTAMP":
            request["Timestamp"] = self.starting_timestamp
        return self.kinesis.get_shard_iterator(**request)["ShardIterator"]

    def read(self, shard_id: str, iterator: str) -> tuple[list[StreamRecord], str | None]:
        page = self.kinesis.get_records(ShardIterator=iterator, Limit=self.batch_size)
        records = [self._record(raw, shard_id) for raw in page["Records"]]
        return records, page.get("NextShardIterator")

    def _record(self, raw: dict[str, Any], shard_id: str) -> StreamRecord:
        arrival = raw["ApproximateArrivalTimestamp"]
        return StreamRecord(
            sequence_number=raw["SequenceNumber"],
            arrival=arrival,
            event_record={
                "kinesis": {
                    "kinesisSchemaVersion": "1.0",
                    "partitionKey": raw["PartitionKey"],
                    "sequenceNumber": raw["SequenceNumber"],
                    "data": base64.b64encode(raw["Data"]).decode("ascii"),
                    "approximateArrivalTimestamp": arrival.timestamp(),
                },
                "eventSource": "aws:kinesis",
                "eventVersion": "1.0",
                "eventID": f"{shard_id}:{raw['SequenceNumber']}",
                "eventName": "aws:kinesis:record",
                "invokeIdentityArn": self.function_arn.replace(":function:", ":role/"),
                "awsRegion": self.region,
                "eventSourceARN": self.stream_arn,
            },
        )


class DynamoDBStreamEventSource(StreamEventSource):
    batch_info_key = "DDBStreamBatchInfo"

    def __init__(self, *args: Any, streams_client: Any, ttl_deletes: Callable[[dict[str, Any]], bool], **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.streams = streams_client
        self.ttl_deletes = ttl_deletes

    def list_shards(self) -> list[str]:
        description = self.streams.describe_stream(StreamArn=self.stream_arn)["StreamDescription"]
        return [shard["ShardId"] for shard in description["Shards"]]

    def shard_iterator(self, shard_id: str) -> str:
        return self.streams.get_shard_iterator(
            StreamArn=self.stream_arn, ShardId=shard_id, ShardIteratorType=self.starting_position
        )["ShardIterator"]

    def read(self, shard_id: str, iterator: str) -> tuple[list[StreamRecord], str | None]:
        page = self.streams.get_records(ShardIterator=iterator, Limit=self.batch_size)
        return [self._record(raw) for raw in page["Records"]], page.get("NextShardIterator")

    def _record(self, raw: dict[str, Any]) -> StreamRecord:
        change = dict(raw["dynamodb"])
        created = change.get("ApproximateCreationDateTime")
        arrival = created if isinstance(created, dt.datetime) else self.clock()
        change["ApproximateCreationDateTime"] = int(arrival.timestamp())
        for image in ("Keys", "NewImage", "OldImage"):
            if image in change:
                change[image] = _json_attributes(change[image])
        record = {
            "eventID": raw["eventID"],
            "eventName": raw["eventName"],
            "eventVersion": raw.get("eventVersion", "1.1"),
            "eventSource": "aws:dynamodb",
            "awsRegion": self.region,
            "dynamodb": change,
            "eventSourceARN": self.stream_arn,
        }
        if raw.get("userIdentity"):
            record["userIdentity"] = raw["userIdentity"]
        elif raw["eventName"] == "REMOVE" and self.ttl_deletes(change.get("Keys", {})):
            # Deleted by the local TTL sweeper: marked the way DynamoDB marks its TTL deletes.
            record["userIdentity"] = {"type": "Service", "principalId": "dynamodb.amazonaws.com"}
        return StreamRecord(sequence_number=change["SequenceNumber"], arrival=arrival, event_record=record)


def _json_attributes(image: dict[str, Any]) -> dict[str, Any]:
    """An image as Lambda's JSON event carries it: binary values (B, BS) base64 text, not bytes."""
    return {name: _json_attribute(value) for name, value in image.items()}


def _json_attribute(value: dict[str, Any]) -> dict[str, Any]:
    if "B" in value:
        return {"B": base64.b64encode(value["B"]).decode()}
    if "BS" in value:
        return {"BS": [base64.b64encode(item).decode() for item in value["BS"]]}
    if "M" in value:
        return {"M": _json_attributes(value["M"])}
    if "L" in value:
        return {"L": [_json_attribute(item) for item in value["L"]]}
    return value


def _iso(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
