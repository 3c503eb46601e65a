"""MonitorTable's item shapes. Key: serverId (HASH) + sortKey (RANGE):

- the endpoint:      sortKey "endpoint",              itemType "endpoint", ownerId, name, url, authTokenCiphertext?
- a probe result:    sortKey "probe#<probedAt>#<id>", itemType "probe_result", TTL expiresAt
- a daily rollup:    sortKey "rollup#<YYYY-MM-DD>",   itemType "probe_rollup" (kept: history survives expiry)
- an owner's count:  serverId "owner#<ownerId>", sortKey "endpoints", serverIds (string set): the endpoints
  the owner has registered, held to its tier's cap (serverIds never contain "#", so no endpoint is one)

An endpoint item also carries failingSince (its probes fail since then) and probesStoppedAt (they failed for
the configured days and the dispatcher no longer probes it, until its owner registers it again).

Only endpoint items carry ownerId, so the EndpointsByOwner index (ownerId, serverId) is sparse: it holds the
registered endpoints and nothing else. It projects name and url, never the token. The token is stored only as
KMS ciphertext (binary, probes/endpoint_tokens.py), so neither the table nor its stream holds a usable one.
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mcp_backend.validation import describe_validation_error

ENDPOINT_SORT_KEY = "endpoint"
OWNER_ENDPOINTS_SORT_KEY = "endpoints"


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
        return probed_at_text(self.probed_at)


ENDPOINTS_BY_OWNER_INDEX = "EndpointsByOwner"
# Every registered endpoint, for the dispatcher: a sparse index whose one partition holds endpoint items only
# (only they carry REGISTRY_ATTRIBUTE), so probe results never add to what a tick reads.
REGISTERED_ENDPOINTS_INDEX = "RegisteredEndpoints"
REGISTRY_ATTRIBUTE = "registry"
REGISTRY_PARTITION = "endpoints"
PROBE_PREFIX = "probe#"
ROLLUP_PREFIX = "rollup#"


def owner_partition(owner_id: str) -> str:
    """The partition of an owner's endpoint count."""
    return f"owner#{owner_id}"


def probed_at_text(moment: datetime) -> str:
    """Sortable ISO-8601 UTC text with milliseconds: the form probe results and drift checks compare."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


class Endpoint(BaseModel):
    """A registered endpoint as the index and the tools see it (never with its auth token)."""

    model_config = ConfigDict(populate_by_name=True, frozen=True, extra="ignore")

    server_id: str = Field(alias="serverId", min_length=1, max_length=128)
    owner_id: str = Field(alias="ownerId", min_length=1)
    name: str
    url: str
    # The probe state the dispatcher decides on (in the RegisteredEndpoints index's projection).
    failing_since: str | None = Field(default=None, alias="failingSince")
    probes_stopped_at: str | None = Field(default=None, alias="probesStoppedAt")

    @classmethod
    def from_item(cls, item: dict[str, Any]) -> Endpoint:
        """From a low-level DynamoDB item ({"S": ...} attribute values)."""
        return cls.model_validate({name: value["S"] for name, value in item.items() if "S" in value})


AUTH_CIPHERTEXT = "authTokenCiphertext"


def endpoint_item(endpoint: Endpoint, *, auth_ciphertext: bytes | None, registered_at: datetime) -> dict[str, Any]:
    item: dict[str, Any] = {
        **key(endpoint.server_id, ENDPOINT_SORT_KEY),
        "itemType": {"S": ItemType.ENDPOINT},
        REGISTRY_ATTRIBUTE: {"S": REGISTRY_PARTITION},
        "ownerId": {"S": endpoint.owner_id},
        "name": {"S": endpoint.name},
        "url": {"S": endpoint.url},
        "registeredAt": {"S": probed_at_text(registered_at)},
    }
    if auth_ciphertext:
        item[AUTH_CIPHERTEXT] = {"B": auth_ciphertext}
    return item


def probe_result_item(result: dict[str, Any], *, probe_id: str, probed_at: datetime, expires_at: int) -> dict[str, Any]:
    """A probe result (the worker's return value) as stored: keyed by time, expiring at `expires_at`."""
    at = probed_at_text(probed_at)
    item: dict[str, Any] = {
        **key(result["serverId"], f"{PROBE_PREFIX}{at}#{probe_id}"),
        "itemType": {"S": ItemType.PROBE_RESULT},
        "status": {"S": ProbeStatus(result["status"])},
        "probedAt": {"S": at},
        "expiresAt": {"N": str(expires_at)},
    }
    for name in ("latencyMs", "toolCount"):
        if result.get(name) is not None:
            item[name] = {"N": str(result[name])}
    for name in ("schemaHash", "endpoint", "protocolVersion"):
        if result.get(name):
            item[name] = {"S": str(result[name])}
    return item


def rollup_sort_key(probe: ProbeResult) -> str:
    """The daily rollup a probe result is folded into: its UTC day."""
    return f"{ROLLUP_PREFIX}{probe.probed_at.astimezone(UTC):%Y-%m-%d}"


def key(server_id: str, sort_key: str) -> dict[str, Any]:
    return {"serverId": {"S": server_id}, "sortKey": {"S": sort_key}}
