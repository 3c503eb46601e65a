"""ProbeRecorder: every OnSuccess envelope from ProbeResultQueue becomes a probe_result item in
MonitorTable (TTL expiresAt), written with BatchWriteItem in chunks of 25; UnprocessedItems are retried
with backoff, and records whose items are still unwritten are reported in batchItemFailures.

The item's key comes from the probe time and the invocation's requestId, so a redelivered message
rewrites the same item: the table's stream sees a MODIFY, not a second INSERT, and drift runs once.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit

from mcp_backend.aws import client_or_lazy
from mcp_backend.batch import require_batch_from
from mcp_backend.config import ProbeRecorderSettings
from mcp_backend.monitor.items import probe_result_item
from mcp_backend.observability import logger, metrics
from mcp_backend.probes.envelope import DestinationEnvelope, MalformedEnvelope

BATCH_WRITE_LIMIT = 25
WRITE_ATTEMPTS = 5
BACKOFF_BASE_SECONDS = 0.05


class ProbeRecorder:
    def __init__(
        self,
        settings: ProbeRecorderSettings,
        dynamodb_client: Any = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        dynamodb_client = client_or_lazy(dynamodb_client, "dynamodb")
        self.settings = settings
        self._dynamodb = dynamodb_client
        self._sleep = sleep

    def handle(self, event: dict[str, Any]) -> dict[str, list[dict[str, str]]]:
        require_batch_from(event, "aws:sqs")
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
            identity = item["serverId"]["S"] + "\n" + item["sortKey"]["S"]
            items[identity] = item  # a duplicate in one batch: one put (BatchWriteItem rejects duplicate keys)
            pending.setdefault(identity, []).append(message_id)
        unwritten = self.write(list(items.values()))
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

    def write(self, items: list[dict[str, Any]]) -> set[str]:
        """BatchWriteItem in chunks of 25, retrying UnprocessedItems with exponential backoff.
        Returns the identities of items still unwritten (their records fail and are redelivered)."""
        unwritten: set[str] = set()
        table = self.settings.monitor_table_name
        for start in range(0, len(items), BATCH_WRITE_LIMIT):
            requests = [{"PutRequest": {"Item": item}} for item in items[start : start + BATCH_WRITE_LIMIT]]
            for attempt in range(WRITE_ATTEMPTS):
                if attempt:
                    self._sleep(BACKOFF_BASE_SECONDS * 2 ** (attempt - 1))
                try:
                    response = self._dynamodb.batch_write_item(RequestItems={table: requests})
                except Exception as error:  # noqa: BLE001 - throttled or failed call: retried, then its records fail
                    logger.warning("batch write failed", extra={"error_type": type(error).__name__})
                    continue
                requests = response.get("UnprocessedItems", {}).get(table, [])
                if not requests:
                    break
            for request in requests:
                item = request["PutRequest"]["Item"]
                unwritten.add(item["serverId"]["S"] + "\n" + item["sortKey"]["S"])
        return unwritten
