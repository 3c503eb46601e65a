"""Expiry rollup: when TTL deletes a probe result, fold it into its endpoint's daily rollup item
(counts by status, latency sum, sample count and max), so history survives expiry.

ADD is not idempotent: each stream record is applied once, keyed on its sequence number. The max
is written first (setting a max twice is harmless), the counts last, so a retry after a failed
max never counts twice.
"""

from __future__ import annotations

from typing import Any

from mcp_backend.monitor.consumer import ProbeResultConsumer
from mcp_backend.monitor.items import ProbeResult, rollup_sort_key


class ExpiryRollup(ProbeResultConsumer):
    image = "old_image"

    def apply(self, *, position: dict[str, str], probe: ProbeResult) -> dict[str, Any]:
        if probe.latency_ms is not None:
            self.table.raise_rollup_latency_max(probe)
        self.table.add_to_rollup(probe)
        return {"rollup": rollup_sort_key(probe), "status": probe.status}
