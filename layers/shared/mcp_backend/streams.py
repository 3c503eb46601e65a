"""Shared by the Kinesis and DynamoDB Streams consumers: a record's position in its stream, and
running a record's side effects once per position, so a retried batch never repeats them.

Kinesis retries a shard from the first failed sequence number (and a timed-out or bisected batch
from its start): records that already succeeded come again. Their position is their identity.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.utilities.data_classes.dynamo_db_stream_event import DynamoDBRecord
from aws_lambda_powertools.utilities.data_classes.kinesis_stream_event import KinesisStreamRecord

from mcp_backend.config import StreamConsumerSettings
from mcp_backend.idempotency import run_once_or_none

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient


def kinesis_position(record: KinesisStreamRecord) -> dict[str, str]:
    """Sequence numbers are unique per shard; Lambda's eventID is "<shardId>:<sequenceNumber>"."""
    return {"shard_id": record.event_id.split(":", 1)[0], "sequence_number": record.kinesis.sequence_number}


def dynamodb_position(record: DynamoDBRecord) -> dict[str, str]:
    stream_record = record.dynamodb
    sequence_number = stream_record.sequence_number if stream_record else None
    # A stream record's eventID is globally unique and the same on every redelivery; it stands in for
    # the shard, which a DynamoDB stream record does not name, so the key never depends on how
    # sequence numbers are allotted across shards.
    return {"shard_id": record.event_id or record.event_source_arn or "", "sequence_number": sequence_number or ""}


class StreamRecordConsumer:
    """Subclasses implement `process` (parse, then `self.apply_once(position=..., ...)`) and `apply`."""

    def __init__(
        self,
        settings: StreamConsumerSettings,
        *,
        idempotent: bool = True,
        idempotency_client: DynamoDBClient | None = None,
    ) -> None:
        self.settings = settings
        self._once = run_once_or_none(
            self.apply,
            settings,
            data_keyword_argument="position",
            key_jmespath="[shard_id, sequence_number]",
            idempotent=idempotent,
            client=idempotency_client,
        )

    def start_invocation(self, lambda_context: Any) -> None:
        if self._once is not None:
            self._once.start_invocation(lambda_context)

    def finish_invocation(self) -> None:
        """Nothing by default."""

    def apply_once(self, *, position: dict[str, str], **kwargs: Any) -> Any:
        if not position.get("sequence_number"):
            raise ValueError("stream record without a sequence number")
        if self._once is None:
            return self.apply(position=position, **kwargs)
        return self._once(position=position, **kwargs)

    # Each consumer names its own keyword arguments (record=..., probe=...); run-once calls it by keyword.
    apply: Callable[..., Any]
