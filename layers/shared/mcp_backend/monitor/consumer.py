"""What both MonitorTable stream consumers share: the table's owner, and reading a probe result from
the stream image their filter selects (NewImage for new results, OldImage for expired ones)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.utilities.data_classes.dynamo_db_stream_event import DynamoDBRecord

from mcp_backend.config import MonitorStreamSettings
from mcp_backend.monitor.items import ProbeResult
from mcp_backend.monitor.table import MonitorTable
from mcp_backend.observability import logger
from mcp_backend.streams import StreamRecordConsumer, dynamodb_position

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient


class ProbeResultConsumer(StreamRecordConsumer):
    image = "new_image"  # or "old_image"

    def __init__(
        self,
        settings: MonitorStreamSettings,
        dynamodb_client: DynamoDBClient | None = None,
        *,
        idempotent: bool = True,
        idempotency_client: DynamoDBClient | None = None,
    ) -> None:
        super().__init__(settings, idempotent=idempotent, idempotency_client=idempotency_client)
        self.table = MonitorTable.from_settings(settings, dynamodb_client)

    def process(self, record: DynamoDBRecord) -> dict[str, Any]:
        """Record handler: raises on an image that is not a probe result or on a failed write."""
        probe = ProbeResult.from_image(getattr(record.dynamodb, self.image) if record.dynamodb else {})
        logger.append_keys(server_id=probe.server_id)
        return self.apply_once(position=dynamodb_position(record), probe=probe)
