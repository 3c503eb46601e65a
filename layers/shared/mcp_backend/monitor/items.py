"""MonitorTable's item shapes. Key: serverId (HASH) + sortKey (RANGE):

- the endpoint:      sortKey "endpoint",              itemType "endpoint"
- a probe result:    sortKey "probe#<probedAt>#<id>", itemType "probe_result", TTL expiresAt
- a daily rollup:    sortKey "rollup#<YYYY-MM-DD>",   itemType "probe_rollup" (kept: history survives expiry)
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mcp_backend.validation import describe_validation_error

ENDPOINT_SORT_KEY = "endpoint"


class ItemType(StrEnum):
    ENDPOINT = "endpoint"
    PROBE_RESULT = "probe_result"
    PROBE_ROLLUP = "probe_rollup"


class ProbeStatus(StrEnum):
    HEALTHY = "healthy"
    DEGRADED = "degraded"
    ERROR = "error"


class MalformedProbeResult(ValueError):
    """A stream image that is not a probe result: the record fails and, after retries, goes to OnFailure."""


class ProbeResult(BaseModel):
    model_config = ConfigDict(populate_by_name=True, frozen=True, extra="ignore")

    server_id: str = Field(alias="serverId", min_length=1)
    sort_key: str = Field(alias="sortKey", pattern=r"^probe#")
    item_type: ItemType = Field(alias="itemType")
    status: ProbeStatus
    probed_at: datetime = Field(alias="probedAt")
    latency_ms: Decimal | None = Field(default=None, alias="latencyMs", ge=0)
    schema_hash: str | None = Field(default=None, alias="schemaHash")

    @classmethod
    def from_image(cls, image: dict[str, Any]) -> ProbeResult:
        """From a stream image as Powertools deserialises it (numbers as Decimal)."""
        try:
            result = cls.model_validate(image)
        except ValidationError as error:
            raise MalformedProbeResult(f"not a probe result: {describe_validation_error(error)}") from None
        if result.item_type is not ItemType.PROBE_RESULT:
            raise MalformedProbeResult(f"itemType is {result.item_type}, not probe_result")
        return result

    @property
    def probed_at_text(self) -> str:
        """Sortable ISO-8601 UTC text, the form stored in the table."""
        return self.probed_at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def key(server_id: str, sort_key: str) -> dict[str, Any]:
    return {"serverId": {"S": server_id}, "sortKey": {"S": sort_key}}
