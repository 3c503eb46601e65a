"""ProbeRecorder: every OnSuccess envelope from ProbeResultQueue becomes a probe_result item in
MonitorTable (TTL expiresAt), written with BatchWriteItem in chunks of 25; UnprocessedItems are retried
with backoff, and records whose items are still unwritten are reported in batchItemFailures.

The item's key comes from the probe time and the invocation's requestId, so a redelivered message
rewrites the same item: the table's stream sees a MODIFY, not a second INSERT, and drift runs once.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.metrics import MetricUnit

from mcp_backend.batch import require_batch_from
from mcp_backend.config import ProbeRecorderSettings
from mcp_backend.monitor.items import probe_result_item
from mcp_backend.monitor.table import MonitorTable, item_identity
from mcp_backend.observability import logger, metrics
from mcp_backend.probes.envelope import DestinationEnvelope, MalformedEnvelope
from mcp_backend.tracing.propagation import extract
from mcp_backend.tracing.spans import span
from mcp_backend.tracing.state import enabled as tracing_enabled

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from opentelemetry.context import Context


class ProbeRecorder:
    def __init__(
        self,
        settings: ProbeRecorderSettings,
        dynamodb_client: DynamoDBClient | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.settings = settings
        self.table = MonitorTable.from_settings(settings, dynamodb_client, sleep)

    def handle(self, event: dict[str, Any]) -> dict[str, list[dict[str, str]]]:
        require_batch_from(event, "aws:sqs")
        # One consumer span for the batch, linked to each probe's span (its trace context rides in the envelope's
        # requestPayload); with one probe in the batch, that probe's span is also its parent.
        probes = [context for record in event["Records"] if (context := _probe_context(record)) is not None]
        with span(
            "record probe results",
            kind="consumer",
            parent=probes[0] if len(probes) == 1 else None,
            links=probes,
            attributes={"messaging.batch.message_count": len(event["Records"])},
        ):
            return self._record(event)

    def _record(self, event: dict[str, Any]) -> dict[str, list[dict[str, str]]]:
        failed: list[str] = []
        pending: dict[str, list[str]] = {}  # item identity -> message ids that produced it
        items: dict[str, dict[str, Any]] = {}
        for record in event["Records"]:
            message_id = record["messageId"]
            try:
                item = self.item_for(DestinationEnvelope.from_body(record.get("body")))
            except (MalformedEnvelope, ValueError, KeyError, TypeError) as error:
                logger.error("probe result not recordable", extra={"message_id": message_id, "reason": str(error)})
                failed.append(message_id)
                continue
            identity = item_identity(item)
            items[identity] = item  # a duplicate in one batch: one put (BatchWriteItem rejects duplicate keys)
            pending.setdefault(identity, []).append(message_id)
        # Unwritten items' records fail and are redelivered.
        unwritten = self.table.put_probe_results(list(items.values()))
        for identity in unwritten:
            failed.extend(pending[identity])
        metrics.add_metric(name="ProbeResultsRecorded", unit=MetricUnit.Count, value=len(items) - len(unwritten))
        return {"batchItemFailures": [{"itemIdentifier": message_id} for message_id in failed]}

    def item_for(self, envelope: DestinationEnvelope) -> dict[str, Any]:
        if not envelope.succeeded or envelope.response_payload is None:
            raise MalformedEnvelope(f"condition {envelope.request_context.condition} is not a probe result")
        result = {"serverId": envelope.server_id, **envelope.response_payload}
        result["serverId"] = envelope.server_id  # the dispatcher's id, whatever the payload says
        probed_at_value = result.get("probedAt")
        probed_at = datetime.fromisoformat(probed_at_value) if probed_at_value else envelope.timestamp
        expires_at = int(probed_at.astimezone(UTC).timestamp()) + self.settings.probe_result_ttl_seconds
        return probe_result_item(
            result, probe_id=envelope.request_context.request_id, probed_at=probed_at, expires_at=expires_at
        )


def _probe_context(record: dict[str, Any]) -> Context | None:
    """The probe's trace context from a record's envelope, or None (tracing off, none, or not an envelope)."""
    if not tracing_enabled():
        return None
    try:
        envelope = json.loads(record.get("body") or "")
    except ValueError:
        return None
    if not isinstance(envelope, dict):
        return None
    # The probe's own span (its result carries it), else the dispatcher's (the payload it was invoked with).
    for part in ("responsePayload", "requestPayload"):
        context = extract(envelope[part]) if isinstance(envelope.get(part), dict) else None
        if context is not None:
            return context
    return None
