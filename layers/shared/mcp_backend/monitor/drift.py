"""Drift detector: a probe_result INSERT whose schemaHash differs from the endpoint's last known hash
updates the endpoint (conditional write) and puts exactly one schema_drift record on the call log.

The conditional write decides, so concurrent or reordered results cannot both claim a change: a
result older than the hash's current one is ignored. The endpoint remembers which result changed
it, so a retry after the call-log put failed re-emits that change (and only that one).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.metrics import MetricUnit

from mcp_backend.calllog.models import CallLogEventType, CallLogRecord
from mcp_backend.calllog.writer import CallLogWriter
from mcp_backend.config import DriftDetectorSettings
from mcp_backend.monitor.consumer import ProbeResultConsumer
from mcp_backend.monitor.items import ProbeResult
from mcp_backend.monitor.table import NO_SCHEMA_HASH, SchemaChange
from mcp_backend.observability import logger, metrics

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient


class DriftDetector(ProbeResultConsumer):
    image = "new_image"

    def __init__(
        self,
        settings: DriftDetectorSettings,
        dynamodb_client: DynamoDBClient | None = None,
        call_log: CallLogWriter | None = None,
        *,
        idempotent: bool = True,
        idempotency_client: DynamoDBClient | None = None,
    ) -> None:
        super().__init__(settings, dynamodb_client, idempotent=idempotent, idempotency_client=idempotency_client)
        # Here the drift record IS the work: losing it must fail the record so the stream retries it.
        self.call_log = call_log or CallLogWriter(settings.call_log_stream_name, raise_on_loss=True)

    def apply(self, *, position: dict[str, str], probe: ProbeResult) -> dict[str, Any]:
        if not probe.schema_hash:
            return {"drift": False, "reason": "no schema in this result"}
        change = self._record_hash(probe)
        if not change.previous_hash:
            return {"drift": False}
        previous = change.previous_hash
        self.call_log.put(
            [
                CallLogRecord(
                    event_type=CallLogEventType.SCHEMA_DRIFT,
                    server_id=probe.server_id,
                    user_id=change.owner_id,
                    occurred_at=probe.probed_at,
                    schema_hash=probe.schema_hash,
                    previous_schema_hash=previous,
                )
            ]
        )
        metrics.add_metric(name="SchemaDriftDetected", unit=MetricUnit.Count, value=1)
        logger.info("schema drift", extra={"schema_hash": probe.schema_hash, "previous_schema_hash": previous})
        return {"drift": True}

    def _record_hash(self, probe: ProbeResult) -> SchemaChange:
        """The hash this result replaced ("" when it changed nothing, or set the first hash) and the owner."""
        change = self.table.record_schema_change(probe)
        if change is not None:
            return change
        endpoint = self.table.read_endpoint(probe.server_id)
        if endpoint is None:
            logger.warning("probe result for an unregistered endpoint")
            metrics.add_metric(name="ProbeResultWithoutEndpoint", unit=MetricUnit.Count, value=1)
            return SchemaChange(NO_SCHEMA_HASH, None)
        owner = endpoint.get("ownerId", {}).get("S")
        if endpoint.get("schemaChangedBy", {}).get("S") == probe.sort_key:
            # This result made the change on an earlier attempt whose call-log put failed.
            return SchemaChange(endpoint.get("previousSchemaHash", {}).get("S", NO_SCHEMA_HASH), owner)
        return SchemaChange(NO_SCHEMA_HASH, owner)
