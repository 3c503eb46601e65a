"""Drift detector: a probe_result INSERT whose schemaHash differs from the endpoint's last known hash
updates the endpoint (conditional write) and puts exactly one schema_drift record on the call log.

The conditional write decides, so concurrent or reordered results cannot both claim a change: a
result older than the hash's current one is ignored. The endpoint remembers which result changed
it, so a retry after the call-log put failed re-emits that change (and only that one).
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.metrics import MetricUnit

from mcp_backend.calllog.models import CallLogEventType, CallLogRecord
from mcp_backend.calllog.writer import CallLogWriter
from mcp_backend.config import DriftDetectorSettings
from mcp_backend.monitor.consumer import ProbeResultConsumer
from mcp_backend.monitor.items import ENDPOINT_SORT_KEY, ProbeResult, key
from mcp_backend.observability import logger, metrics

_NO_HASH = ""  # previousSchemaHash of a first (baseline) hash: no drift
_CHANGE = (
    "SET previousSchemaHash = if_not_exists(lastSchemaHash, :none), lastSchemaHash = :hash, "
    "schemaHashSince = :at, schemaChangedBy = :probe"
)
# Only a registered endpoint, only a different hash, only from a result newer than the current hash's.
_IS_CHANGE = (
    "attribute_exists(serverId) AND (attribute_not_exists(lastSchemaHash) OR "
    "(lastSchemaHash <> :hash AND schemaHashSince < :at))"
)


class DriftDetector(ProbeResultConsumer):
    image = "new_image"

    def __init__(
        self,
        settings: DriftDetectorSettings,
        dynamodb_client: Any = None,
        call_log: CallLogWriter | None = None,
        *,
        idempotent: bool = True,
        idempotency_client: Any = None,
    ) -> None:
        super().__init__(settings, dynamodb_client, idempotent=idempotent, idempotency_client=idempotency_client)
        # Here the drift record IS the work: losing it must fail the record so the stream retries it.
        self.call_log = call_log or CallLogWriter(settings.call_log_stream_name, raise_on_loss=True)

    def apply(self, *, position: dict[str, str], probe: ProbeResult) -> dict[str, Any]:
        if not probe.schema_hash:
            return {"drift": False, "reason": "no schema in this result"}
        previous = self._record_hash(probe)
        if not previous:
            return {"drift": False}
        self.call_log.put(
            [
                CallLogRecord(
                    event_type=CallLogEventType.SCHEMA_DRIFT,
                    server_id=probe.server_id,
                    occurred_at=probe.probed_at,
                    schema_hash=probe.schema_hash,
                    previous_schema_hash=previous,
                )
            ]
        )
        metrics.add_metric(name="SchemaDriftDetected", unit=MetricUnit.Count, value=1)
        logger.info("schema drift", extra={"schema_hash": probe.schema_hash, "previous_schema_hash": previous})
        return {"drift": True}

    def _record_hash(self, probe: ProbeResult) -> str:
        """The hash this result replaced, or "" when it changed nothing (or set the first hash)."""
        try:
            response = self._dynamodb.update_item(
                TableName=self.table_name,
                Key=key(probe.server_id, ENDPOINT_SORT_KEY),
                UpdateExpression=_CHANGE,
                ConditionExpression=_IS_CHANGE,
                ExpressionAttributeValues={
                    ":hash": {"S": probe.schema_hash},
                    ":at": {"S": probe.probed_at_text},
                    ":probe": {"S": probe.sort_key},
                    ":none": {"S": _NO_HASH},
                },
                ReturnValues="ALL_NEW",
            )
            return response["Attributes"]["previousSchemaHash"]["S"]
        except self._dynamodb.exceptions.ConditionalCheckFailedException:
            pass
        endpoint = self._dynamodb.get_item(
            TableName=self.table_name, Key=key(probe.server_id, ENDPOINT_SORT_KEY), ConsistentRead=True
        ).get("Item")
        if endpoint is None:
            logger.warning("probe result for an unregistered endpoint")
            metrics.add_metric(name="ProbeResultWithoutEndpoint", unit=MetricUnit.Count, value=1)
            return _NO_HASH
        if endpoint.get("schemaChangedBy", {}).get("S") == probe.sort_key:
            # This result made the change on an earlier attempt whose call-log put failed.
            return endpoint.get("previousSchemaHash", {}).get("S", _NO_HASH)
        return _NO_HASH
