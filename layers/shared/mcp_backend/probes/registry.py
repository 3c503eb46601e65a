"""Registered endpoints in MonitorTable (see monitor/items.py): what the MCP tools and the dispatcher use.

A user sees only endpoints whose ownerId is their user id; someone else's endpoint is indistinguishable
from none. The optional bearer token is written to the endpoint item only: the EndpointsByOwner index
does not project it, no tool returns it (only hasAuth), and only the ProbeWorker reads it back.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from mcp_backend.monitor.items import (
    ENDPOINT_SORT_KEY,
    ENDPOINTS_BY_OWNER_INDEX,
    PROBE_PREFIX,
    Endpoint,
    ProbeStatus,
    endpoint_item,
    key,
    probed_at_text,
)

SELF_SERVER_ID = "self"
SELF_OWNER_ID = "stack"  # the stack's own endpoint belongs to no API user
MAX_STATUS_RESULTS = 2000  # probe results read for one uptime figure (a day at one per minute is 1440)


class EndpointRegistry:
    def __init__(self, table_name: str, dynamodb_client: Any) -> None:
        self.table_name = table_name
        self._dynamodb = dynamodb_client

    # -- writes -----------------------------------------------------------------
    def register(self, owner_id: str, url: str, name: str, auth_token: str | None) -> dict[str, Any]:
        """Register (or re-register: same owner and URL, same serverId) an endpoint."""
        digest = hashlib.sha256(f"{owner_id}\n{url}".encode()).hexdigest()
        endpoint = Endpoint(server_id=f"ep-{digest[:24]}", owner_id=owner_id, name=name, url=url)
        item = endpoint_item(endpoint, auth_token=auth_token, registered_at=datetime.now(UTC))
        # Only the registration fields change: schema state kept by the drift detector stays.
        names = {f"#{n}": n for n in item if n not in ("serverId", "sortKey")}
        values = {f":{n}": v for n, v in item.items() if n not in ("serverId", "sortKey")}
        update = "SET " + ", ".join(f"{alias} = :{alias[1:]}" for alias in names)
        if not auth_token:
            names["#authToken"] = "authToken"
            update += " REMOVE #authToken"
        self._dynamodb.update_item(
            TableName=self.table_name,
            Key=key(endpoint.server_id, ENDPOINT_SORT_KEY),
            UpdateExpression=update,
            # A serverId held by another owner is never taken over (a hash collision, in practice never).
            ConditionExpression="attribute_not_exists(ownerId) OR ownerId = :ownerId",
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=values,
        )
        return {"serverId": endpoint.server_id, "name": name, "url": url, "hasAuth": bool(auth_token)}

    def ensure_self(self, url: str, auth_token: str | None) -> bool:
        """Register the stack's own endpoint once (first run); True when this call registered it."""
        endpoint = Endpoint(server_id=SELF_SERVER_ID, owner_id=SELF_OWNER_ID, name="this stack", url=url)
        try:
            self._dynamodb.put_item(
                TableName=self.table_name,
                Item=endpoint_item(endpoint, auth_token=auth_token, registered_at=datetime.now(UTC)),
                ConditionExpression="attribute_not_exists(serverId) OR #url <> :url",
                ExpressionAttributeNames={"#url": "url"},
                ExpressionAttributeValues={":url": {"S": url}},
            )
        except self._dynamodb.exceptions.ConditionalCheckFailedException:
            return False
        return True

    def set_self_token(self, auth_token: str) -> None:
        """The self-probe's key, once: a later tick never replaces a token that is in use."""
        self._dynamodb.update_item(
            TableName=self.table_name,
            Key=key(SELF_SERVER_ID, ENDPOINT_SORT_KEY),
            UpdateExpression="SET authToken = :token",
            ConditionExpression="attribute_exists(serverId) AND attribute_not_exists(authToken)",
            ExpressionAttributeValues={":token": {"S": auth_token}},
        )

    # -- reads ------------------------------------------------------------------
    def self_registered(self) -> bool:
        item = self._dynamodb.get_item(
            TableName=self.table_name, Key=key(SELF_SERVER_ID, ENDPOINT_SORT_KEY), ProjectionExpression="serverId"
        )
        return "Item" in item

    def all_endpoints(self) -> Iterator[Endpoint]:
        """Every registered endpoint: a scan of the sparse index (endpoint items only, no tokens)."""
        for page in self._dynamodb.get_paginator("scan").paginate(
            TableName=self.table_name, IndexName=ENDPOINTS_BY_OWNER_INDEX
        ):
            for item in page["Items"]:
                yield Endpoint.from_item(item)

    def list_for(self, owner_id: str) -> list[dict[str, Any]]:
        endpoints: list[Endpoint] = []
        for page in self._dynamodb.get_paginator("query").paginate(
            TableName=self.table_name,
            IndexName=ENDPOINTS_BY_OWNER_INDEX,
            KeyConditionExpression="ownerId = :owner",
            ExpressionAttributeValues={":owner": {"S": owner_id}},
        ):
            endpoints.extend(Endpoint.from_item(item) for item in page["Items"])
        return [{"serverId": e.server_id, "name": e.name, "url": e.url} for e in endpoints]

    def status(self, owner_id: str, server_id: str, window_seconds: int) -> dict[str, Any] | None:
        """Latest result, uptime over the window and the last schema change; None if not the owner's."""
        item = self._dynamodb.get_item(
            TableName=self.table_name, Key=key(server_id, ENDPOINT_SORT_KEY), ConsistentRead=True
        ).get("Item")
        if item is None or item.get("ownerId", {}).get("S") != owner_id:
            return None
        since = probed_at_text(datetime.now(UTC) - timedelta(seconds=window_seconds))
        results = self._results_since(server_id, since)
        up = sum(1 for r in results if r["status"] in (ProbeStatus.HEALTHY, ProbeStatus.DEGRADED))
        view: dict[str, Any] = {
            "serverId": server_id,
            "name": item["name"]["S"],
            "url": item["url"]["S"],
            "hasAuth": "authToken" in item,
            "latest": results[-1] if results else self._latest(server_id),
            "uptime": {
                "windowSeconds": window_seconds,
                "probes": len(results),
                "up": up,
                "ratio": round(up / len(results), 4) if results else None,
            },
            "lastSchemaChange": None,
        }
        if "schemaHashSince" in item:
            view["lastSchemaChange"] = {
                "at": item["schemaHashSince"]["S"],
                "schemaHash": item.get("lastSchemaHash", {}).get("S"),
                "previousSchemaHash": item.get("previousSchemaHash", {}).get("S") or None,
            }
        return view

    def _results_since(self, server_id: str, since: str) -> list[dict[str, Any]]:
        results: list[dict[str, Any]] = []
        for page in self._dynamodb.get_paginator("query").paginate(
            TableName=self.table_name,
            KeyConditionExpression="serverId = :id AND sortKey BETWEEN :from AND :to",
            ExpressionAttributeValues={
                ":id": {"S": server_id},
                ":from": {"S": f"{PROBE_PREFIX}{since}"},
                ":to": {"S": f"{PROBE_PREFIX}\uffff"},
            },
            ScanIndexForward=False,  # newest first: a capped read keeps the most recent results
        ):
            results.extend(_result_view(item) for item in page["Items"])
            if len(results) >= MAX_STATUS_RESULTS:
                break
        return results[:MAX_STATUS_RESULTS][::-1]

    def _latest(self, server_id: str) -> dict[str, Any] | None:
        items = self._dynamodb.query(
            TableName=self.table_name,
            KeyConditionExpression="serverId = :id AND begins_with(sortKey, :probe)",
            ExpressionAttributeValues={":id": {"S": server_id}, ":probe": {"S": PROBE_PREFIX}},
            ScanIndexForward=False,
            Limit=1,
        )["Items"]
        return _result_view(items[0]) if items else None


def _result_view(item: dict[str, Any]) -> dict[str, Any]:
    view: dict[str, Any] = {"status": item["status"]["S"], "probedAt": item["probedAt"]["S"]}
    for name in ("latencyMs", "toolCount"):
        if name in item:
            view[name] = int(float(item[name]["N"]))
    if "schemaHash" in item:
        view["schemaHash"] = item["schemaHash"]["S"]
    return view
