"""MonitorTable's owner: every read and write of the table goes through `MonitorTable` (item shapes are in
monitor/items.py). The endpoint registry, the probe worker and recorder, the drift detector and the expiry
rollup call it; none of them touches DynamoDB or the table's name.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol, cast

from mcp_backend.aws import client_or_lazy
from mcp_backend.monitor.items import (
    AUTH_CIPHERTEXT,
    ENDPOINT_SORT_KEY,
    ENDPOINTS_BY_OWNER_INDEX,
    OWNER_ENDPOINTS_SORT_KEY,
    PROBE_PREFIX,
    REGISTERED_ENDPOINTS_INDEX,
    REGISTRY_ATTRIBUTE,
    REGISTRY_PARTITION,
    ROLLUP_PREFIX,
    Endpoint,
    ItemType,
    ProbeResult,
    endpoint_item,
    key,
    owner_partition,
    rollup_sort_key,
)
from mcp_backend.observability import logger

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

BATCH_WRITE_LIMIT = 25
WRITE_ATTEMPTS = 5
BACKOFF_BASE_SECONDS = 0.05

NO_SCHEMA_HASH = ""  # previousSchemaHash of a first (baseline) hash: no drift


@dataclass(frozen=True)
class SchemaChange:
    previous_hash: str  # NO_SCHEMA_HASH: the endpoint's first hash, no drift
    owner_id: str | None  # whose endpoint it is (alerts about it count against its owner too)


_SCHEMA_CHANGE = (
    "SET previousSchemaHash = if_not_exists(lastSchemaHash, :none), lastSchemaHash = :hash, "
    "schemaHashSince = :at, schemaChangedBy = :probe"
)
# Only a registered endpoint, only a different hash, only from a result newer than the current hash's.
_IS_SCHEMA_CHANGE = (
    "attribute_exists(serverId) AND (attribute_not_exists(lastSchemaHash) OR "
    "(lastSchemaHash <> :hash AND schemaHashSince < :at))"
)


class MonitorTableSettings(Protocol):
    """Any function settings that name the table (read-only, as the frozen settings models are)."""

    @property
    def monitor_table_name(self) -> str: ...


def item_identity(item: dict[str, Any]) -> str:
    """An item's key as one string: what BatchWriteItem reports back as unprocessed."""
    return item["serverId"]["S"] + "\n" + item["sortKey"]["S"]


class MonitorTable:
    def __init__(
        self, table_name: str, client: DynamoDBClient | None = None, sleep: Callable[[float], None] = time.sleep
    ) -> None:
        self.table_name = table_name
        self._client = client_or_lazy(client, "dynamodb")
        self._sleep = sleep

    @staticmethod
    def is_configured(settings: MonitorTableSettings) -> bool:
        """The function's environment names the table (only the functions that use it have it)."""
        return bool(settings.monitor_table_name)

    @classmethod
    def from_settings(
        cls,
        settings: MonitorTableSettings,
        client: DynamoDBClient | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> MonitorTable:
        return cls(settings.monitor_table_name, client, sleep)

    # -- endpoints: writes ------------------------------------------------------
    def register_endpoint(self, endpoint: Endpoint, auth_ciphertext: bytes | None, cap: int | None = None) -> bool:
        """Write the registration fields; schema state kept by the drift detector stays, probes stopped for
        failing resume. With a cap, the endpoint and its owner's count are written in one transaction:
        False (and nothing written) when the owner has `cap` other endpoints registered."""
        item = endpoint_item(endpoint, auth_ciphertext=auth_ciphertext, registered_at=datetime.now(UTC))
        names: dict[str, str] = {f"#{n}": n for n in item if n not in ("serverId", "sortKey")}
        values: dict[str, Any] = {f":{n}": v for n, v in item.items() if n not in ("serverId", "sortKey")}
        update = "SET " + ", ".join(f"{alias} = :{alias[1:]}" for alias in names)
        # A re-registration resumes probes that stopped for failing (a fresh start for the failure clock).
        update += " REMOVE failingSince, probesStoppedAt"
        if not auth_ciphertext:
            names[f"#{AUTH_CIPHERTEXT}"] = AUTH_CIPHERTEXT
            update += f", #{AUTH_CIPHERTEXT}"
        write: Any = {
            "TableName": self.table_name,
            "Key": key(endpoint.server_id, ENDPOINT_SORT_KEY),
            "UpdateExpression": update,
            # A serverId held by another owner is never taken over (a hash collision, in practice never).
            "ConditionExpression": "attribute_not_exists(ownerId) OR ownerId = :ownerId",
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": values,
        }
        if cap is None:
            self._client.update_item(**write)
            return True
        try:
            self._client.transact_write_items(
                TransactItems=[{"Update": write}, {"Update": cast(Any, self._count_endpoint(endpoint, cap))}]
            )
        except self._client.exceptions.TransactionCanceledException as error:
            reasons = [reason.get("Code") for reason in error.response.get("CancellationReasons", [])]
            if reasons[1:2] == ["ConditionalCheckFailed"] and reasons[:1] != ["ConditionalCheckFailed"]:
                return False
            raise
        return True

    def _count_endpoint(self, endpoint: Endpoint, cap: int) -> dict[str, Any]:
        """The owner's set of registered serverIds gains this one, unless it holds `cap` others."""
        return {
            "TableName": self.table_name,
            "Key": key(owner_partition(endpoint.owner_id), OWNER_ENDPOINTS_SORT_KEY),
            "UpdateExpression": "ADD serverIds :ids",
            "ConditionExpression": (
                "attribute_not_exists(serverIds) OR contains(serverIds, :id) OR size(serverIds) < :cap"
            ),
            "ExpressionAttributeValues": {
                ":ids": {"SS": [endpoint.server_id]},
                ":id": {"S": endpoint.server_id},
                ":cap": {"N": str(cap)},
            },
        }

    def delete_endpoint(self, server_id: str, owner_id: str) -> bool:
        """Delete the owner's endpoint item and its place in the owner's count, in one transaction; the
        dispatcher no longer sees it, so its probes (and their alerts) stop. False when it is not the
        owner's (someone else's endpoint is indistinguishable from none). Its probe results expire by TTL."""
        try:
            self._client.transact_write_items(
                TransactItems=[
                    {
                        "Delete": {
                            "TableName": self.table_name,
                            "Key": key(server_id, ENDPOINT_SORT_KEY),
                            "ConditionExpression": "ownerId = :owner",
                            "ExpressionAttributeValues": {":owner": {"S": owner_id}},
                        }
                    },
                    {
                        "Update": {
                            "TableName": self.table_name,
                            "Key": key(owner_partition(owner_id), OWNER_ENDPOINTS_SORT_KEY),
                            "UpdateExpression": "DELETE serverIds :ids",
                            "ExpressionAttributeValues": {":ids": {"SS": [server_id]}},
                        }
                    },
                ]
            )
        except self._client.exceptions.TransactionCanceledException:
            return False
        return True

    def set_endpoint_url(self, server_id: str, url: str) -> None:
        """Point an existing endpoint at a new URL; its token and schema state stay."""
        self._client.update_item(
            TableName=self.table_name,
            Key=key(server_id, ENDPOINT_SORT_KEY),
            UpdateExpression="SET #url = :url",
            ConditionExpression="attribute_exists(serverId)",
            ExpressionAttributeNames={"#url": "url"},
            ExpressionAttributeValues={":url": {"S": url}},
        )

    # -- endpoints: failing probes ---------------------------------------------
    def mark_failing(self, server_id: str, since: str) -> None:
        """The endpoint's probe failed: it is failing since `since` unless it already was (a conditional
        write that changes nothing, and streams nothing, while the endpoint keeps failing)."""
        self._write_if(
            server_id,
            "SET failingSince = :since",
            "attribute_exists(ownerId) AND attribute_not_exists(failingSince)",
            {":since": {"S": since}},
        )

    def mark_passing(self, server_id: str) -> None:
        """The endpoint's probe passed: it is no longer failing."""
        self._write_if(server_id, "REMOVE failingSince", "attribute_exists(failingSince)", None)

    def stop_probes(self, server_id: str, failing_before: str, at: str) -> str | None:
        """Stop probing an endpoint failing since before `failing_before`; returns its owner when this call
        stopped it (so exactly one caller sends the owner's notice), else None."""
        try:
            response = self._client.update_item(
                TableName=self.table_name,
                Key=key(server_id, ENDPOINT_SORT_KEY),
                UpdateExpression="SET probesStoppedAt = :at",
                ConditionExpression="failingSince < :before AND attribute_not_exists(probesStoppedAt)",
                ExpressionAttributeValues={":at": {"S": at}, ":before": {"S": failing_before}},
                ReturnValues="ALL_NEW",
            )
        except self._client.exceptions.ConditionalCheckFailedException:
            return None
        owner: str = response["Attributes"]["ownerId"]["S"]
        return owner

    def _write_if(self, server_id: str, update: str, condition: str, values: dict[str, Any] | None) -> None:
        try:
            self._client.update_item(
                TableName=self.table_name,
                Key=key(server_id, ENDPOINT_SORT_KEY),
                UpdateExpression=update,
                ConditionExpression=condition,
                **({"ExpressionAttributeValues": values} if values else {}),  # type: ignore[arg-type]
            )
        except self._client.exceptions.ConditionalCheckFailedException:
            pass  # nothing to change

    # -- endpoints: reads -------------------------------------------------------
    def read_endpoint(self, server_id: str) -> dict[str, Any] | None:
        """The whole endpoint item (auth token and schema state included), read consistently."""
        item: dict[str, Any] | None = self._client.get_item(
            TableName=self.table_name, Key=key(server_id, ENDPOINT_SORT_KEY), ConsistentRead=True
        ).get("Item")
        return item

    def probe_target(self, server_id: str) -> tuple[str, str, bytes | None] | None:
        """The registered URL, owner and sealed auth token, or None when the endpoint is not registered."""
        item = self._client.get_item(
            TableName=self.table_name,
            Key=key(server_id, ENDPOINT_SORT_KEY),
            ProjectionExpression=f"{AUTH_CIPHERTEXT}, ownerId, #url",
            ExpressionAttributeNames={"#url": "url"},
        ).get("Item")
        if item is None or "url" not in item or "ownerId" not in item:
            return None
        return item["url"]["S"], item["ownerId"]["S"], item.get(AUTH_CIPHERTEXT, {}).get("B")

    def registered_endpoints(self) -> Iterator[Endpoint]:
        """Every registered endpoint with its probe state (no tokens): a Query of the one partition of the
        sparse RegisteredEndpoints index, which holds endpoint items only; never a Scan, so what it reads
        grows with the endpoints and not with their probe results."""
        for page in self._client.get_paginator("query").paginate(
            TableName=self.table_name,
            IndexName=REGISTERED_ENDPOINTS_INDEX,
            KeyConditionExpression="#registry = :endpoints",
            ExpressionAttributeNames={"#registry": REGISTRY_ATTRIBUTE},
            ExpressionAttributeValues={":endpoints": {"S": REGISTRY_PARTITION}},
        ):
            for item in page["Items"]:
                yield Endpoint.from_item(item)

    def unindexed_endpoint_ids(self) -> Iterator[str]:
        """Endpoint items without the RegisteredEndpoints index's key: those a stack stored before the index
        existed. The one Scan of the table, for the one-off upgrade (monitor/upgrade.py); never on a schedule."""
        for page in self._client.get_paginator("scan").paginate(
            TableName=self.table_name,
            FilterExpression="sortKey = :endpoint AND attribute_not_exists(#registry)",
            ProjectionExpression="serverId",
            ExpressionAttributeNames={"#registry": REGISTRY_ATTRIBUTE},
            ExpressionAttributeValues={":endpoint": {"S": ENDPOINT_SORT_KEY}},
        ):
            for item in page["Items"]:
                yield item["serverId"]["S"]

    def index_endpoint(self, server_id: str) -> bool:
        """Give a registered endpoint the index's key; False when it is no longer registered (deleted since it
        was read: the condition keeps an update from creating a half item)."""
        try:
            self._client.update_item(
                TableName=self.table_name,
                Key=key(server_id, ENDPOINT_SORT_KEY),
                UpdateExpression="SET #registry = :endpoints",
                ConditionExpression="attribute_exists(ownerId)",
                ExpressionAttributeNames={"#registry": REGISTRY_ATTRIBUTE},
                ExpressionAttributeValues={":endpoints": {"S": REGISTRY_PARTITION}},
            )
        except self._client.exceptions.ConditionalCheckFailedException:
            return False
        return True

    def endpoints_of(self, owner_id: str) -> list[Endpoint]:
        endpoints: list[Endpoint] = []
        for page in self._client.get_paginator("query").paginate(
            TableName=self.table_name,
            IndexName=ENDPOINTS_BY_OWNER_INDEX,
            KeyConditionExpression="ownerId = :owner",
            ExpressionAttributeValues={":owner": {"S": owner_id}},
        ):
            endpoints.extend(Endpoint.from_item(item) for item in page["Items"])
        return endpoints

    # -- probe results ----------------------------------------------------------
    def probe_results_since(self, server_id: str, since: str, limit: int) -> list[dict[str, Any]]:
        """The newest `limit` result items probed at or after `since` (probedAt text), oldest first."""
        items: list[dict[str, Any]] = []
        for page in self._client.get_paginator("query").paginate(
            TableName=self.table_name,
            KeyConditionExpression="serverId = :id AND sortKey BETWEEN :from AND :to",
            ExpressionAttributeValues={
                ":id": {"S": server_id},
                ":from": {"S": f"{PROBE_PREFIX}{since}"},
                ":to": {"S": f"{PROBE_PREFIX}\uffff"},
            },
            ScanIndexForward=False,  # newest first: a capped read keeps the most recent results
        ):
            items.extend(page["Items"])
            if len(items) >= limit:
                break
        return items[:limit][::-1]

    def latest_probe_result(self, server_id: str) -> dict[str, Any] | None:
        items = self._client.query(
            TableName=self.table_name,
            KeyConditionExpression="serverId = :id AND begins_with(sortKey, :probe)",
            ExpressionAttributeValues={":id": {"S": server_id}, ":probe": {"S": PROBE_PREFIX}},
            ScanIndexForward=False,
            Limit=1,
        )["Items"]
        return items[0] if items else None

    def put_probe_results(self, items: list[dict[str, Any]]) -> set[str]:
        """BatchWriteItem in chunks of 25, retrying UnprocessedItems with exponential backoff.
        Returns the identities (item_identity) of items still unwritten."""
        unwritten: set[str] = set()
        for start in range(0, len(items), BATCH_WRITE_LIMIT):
            # Items in DynamoDB's attribute-value form (dict[str, Any]), the way item_identity reads them back.
            requests: list[Any] = [{"PutRequest": {"Item": item}} for item in items[start : start + BATCH_WRITE_LIMIT]]
            for attempt in range(WRITE_ATTEMPTS):
                if attempt:
                    self._sleep(BACKOFF_BASE_SECONDS * 2 ** (attempt - 1))
                try:
                    response = self._client.batch_write_item(RequestItems={self.table_name: requests})
                except Exception as error:  # noqa: BLE001 - throttled or failed call: retried, then reported
                    logger.warning("batch write failed", extra={"error_type": type(error).__name__})
                    continue
                requests = response.get("UnprocessedItems", {}).get(self.table_name, [])
                if not requests:
                    break
            unwritten.update(item_identity(request["PutRequest"]["Item"]) for request in requests)
        return unwritten

    # -- schema state (drift) ---------------------------------------------------
    def record_schema_change(self, probe: ProbeResult) -> SchemaChange | None:
        """Make the probe's schema hash the endpoint's if it is a change (conditional write, so concurrent or
        reordered results cannot both claim it). Returns the replaced hash (NO_SCHEMA_HASH for the first
        one) and the endpoint's owner, or None when the write changed nothing."""
        try:
            response = self._client.update_item(
                TableName=self.table_name,
                Key=key(probe.server_id, ENDPOINT_SORT_KEY),
                UpdateExpression=_SCHEMA_CHANGE,
                ConditionExpression=_IS_SCHEMA_CHANGE,
                ExpressionAttributeValues={
                    ":hash": {"S": probe.schema_hash},
                    ":at": {"S": probe.probed_at_text},
                    ":probe": {"S": probe.sort_key},
                    ":none": {"S": NO_SCHEMA_HASH},
                },
                ReturnValues="ALL_NEW",
            )
        except self._client.exceptions.ConditionalCheckFailedException:
            return None
        attributes = response["Attributes"]
        return SchemaChange(attributes["previousSchemaHash"]["S"], attributes.get("ownerId", {}).get("S"))

    # -- daily rollups ----------------------------------------------------------
    def raise_rollup_latency_max(self, probe: ProbeResult) -> None:
        """Raise the day's latencyMaxMs to the probe's latency (setting a max twice is harmless)."""
        try:
            self._client.update_item(
                TableName=self.table_name,
                Key=key(probe.server_id, rollup_sort_key(probe)),
                UpdateExpression="SET latencyMaxMs = :latency",
                ConditionExpression="attribute_not_exists(latencyMaxMs) OR latencyMaxMs < :latency",
                ExpressionAttributeValues={":latency": {"N": str(probe.latency_ms)}},
            )
        except self._client.exceptions.ConditionalCheckFailedException:
            pass  # the day's max is already at least this

    def add_to_rollup(self, probe: ProbeResult) -> None:
        """ADD the probe to its day's counts (not idempotent: the caller applies each result once)."""
        latency = probe.latency_ms if probe.latency_ms is not None else 0
        self._client.update_item(
            TableName=self.table_name,
            Key=key(probe.server_id, rollup_sort_key(probe)),
            UpdateExpression=(
                "SET itemType = :type, #day = :day, updatedAt = :now "
                "ADD probeCount :one, #status :one, latencySumMs :latency, latencySampleCount :sampled"
            ),
            ExpressionAttributeNames={"#day": "day", "#status": f"{probe.status}Count"},
            ExpressionAttributeValues={
                ":type": {"S": ItemType.PROBE_ROLLUP},
                ":day": {"S": rollup_sort_key(probe).removeprefix(ROLLUP_PREFIX)},
                ":now": {"S": datetime.now(UTC).isoformat(timespec="milliseconds")},
                ":one": {"N": "1"},
                ":latency": {"N": str(latency)},
                ":sampled": {"N": "1" if probe.latency_ms is not None else "0"},
            },
        )
