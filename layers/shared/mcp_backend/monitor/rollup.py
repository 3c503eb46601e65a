"""Expiry rollup: when TTL deletes a probe result, fold it into its endpoint's daily rollup item
(counts by status, latency sum, sample count and max), so history survives expiry.

ADD is not idempotent: each stream record is applied once, keyed on its sequence number. The max
is written first (setting a max twice is harmless), the counts last, so a retry after a failed
max never counts twice.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from mcp_backend.monitor.consumer import ProbeResultConsumer
from mcp_backend.monitor.items import ItemType, ProbeResult, key


def rollup_sort_key(probe: ProbeResult) -> str:
    return f"rollup#{probe.probed_at.astimezone(UTC):%Y-%m-%d}"


class ExpiryRollup(ProbeResultConsumer):
    image = "old_image"

    def apply(self, *, position: dict[str, str], probe: ProbeResult) -> dict[str, Any]:
        rollup_key = key(probe.server_id, rollup_sort_key(probe))
        if probe.latency_ms is not None:
            self._raise_max(rollup_key, probe)
        latency = probe.latency_ms if probe.latency_ms is not None else 0
        self._dynamodb.update_item(
            TableName=self.table_name,
            Key=rollup_key,
            UpdateExpression=(
                "SET itemType = :type, #day = :day, updatedAt = :now "
                "ADD probeCount :one, #status :one, latencySumMs :latency, latencySampleCount :sampled"
            ),
            ExpressionAttributeNames={"#day": "day", "#status": f"{probe.status}Count"},
            ExpressionAttributeValues={
                ":type": {"S": ItemType.PROBE_ROLLUP},
                ":day": {"S": rollup_sort_key(probe).removeprefix("rollup#")},
                ":now": {"S": datetime.now(UTC).isoformat(timespec="milliseconds")},
                ":one": {"N": "1"},
                ":latency": {"N": str(latency)},
                ":sampled": {"N": "1" if probe.latency_ms is not None else "0"},
            },
        )
        return {"rollup": rollup_key["sortKey"]["S"], "status": probe.status}

    def _raise_max(self, rollup_key: dict[str, Any], probe: ProbeResult) -> None:
        try:
            self._dynamodb.update_item(
                TableName=self.table_name,
                Key=rollup_key,
                UpdateExpression="SET latencyMaxMs = :latency",
                ConditionExpression="attribute_not_exists(latencyMaxMs) OR latencyMaxMs < :latency",
                ExpressionAttributeValues={":latency": {"N": str(probe.latency_ms)}},
            )
        except self._dynamodb.exceptions.ConditionalCheckFailedException:
            pass  # the day's max is already at least this
