"""Registered endpoints, as the MCP tools and the dispatcher see them; stored through MonitorTable's owner
(monitor/table.py).

A user sees only endpoints whose ownerId is their user id; someone else's endpoint is indistinguishable
from none. The optional bearer token is sealed with KMS (probes/endpoint_tokens.py) before it is written, to
the endpoint item only: the EndpointsByOwner index does not project it, no tool returns it (only hasAuth),
and only the ProbeWorker can open it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from mcp_backend.monitor.items import AUTH_CIPHERTEXT, Endpoint, ProbeStatus, probed_at_text
from mcp_backend.monitor.table import MonitorTable
from mcp_backend.observability import count_limit_refusal
from mcp_backend.probes.endpoint_tokens import EndpointTokenCipher
from mcp_backend.quotas import EndpointQuota

SELF_SERVER_ID = "self"
SELF_OWNER_ID = "stack"  # the stack's own endpoint belongs to no API user
MAX_STATUS_RESULTS = 2000  # probe results read for one uptime figure (a day at one per minute is 1440)


class EndpointTokensUnsealable(RuntimeError):
    """A token was given but this function has no key to seal it with: it is never stored in plaintext."""


class EndpointRegistry:
    def __init__(self, table: MonitorTable, cipher: EndpointTokenCipher | None = None) -> None:
        self.table = table
        self.cipher = cipher

    @property
    def seals_tokens(self) -> bool:
        return self.cipher is not None

    def _seal(self, server_id: str, owner_id: str, auth_token: str) -> bytes:
        if self.cipher is None:
            raise EndpointTokensUnsealable("no endpoint token key configured (ENDPOINT_TOKEN_KEY_ID)")
        return self.cipher.seal(server_id, owner_id, auth_token)

    # -- writes -----------------------------------------------------------------
    def register(
        self, owner_id: str, url: str, name: str, auth_token: str | None, quota: EndpointQuota | None = None
    ) -> dict[str, Any]:
        """Register (or re-register: same owner and URL, same serverId) an endpoint. Over the owner's quota,
        QuotaExceeded and nothing is written (a re-registration never counts twice)."""
        digest = hashlib.sha256(f"{owner_id}\n{url}".encode()).hexdigest()
        endpoint = Endpoint(server_id=f"ep-{digest[:24]}", owner_id=owner_id, name=name, url=url)
        sealed = self._seal(endpoint.server_id, owner_id, auth_token) if auth_token else None
        if not self.table.register_endpoint(endpoint, sealed, quota.endpoints if quota else None):
            refused = quota.refused()  # type: ignore[union-attr]  # only a capped write is refused
            count_limit_refusal(refused.limit, refused.tier, owner_id, refused.resets)
            raise refused
        return {"serverId": endpoint.server_id, "name": name, "url": url, "hasAuth": bool(auth_token)}

    def unregister(self, owner_id: str, server_id: str) -> bool:
        """Delete the owner's endpoint: no more probes, results or alerts for it. False when it is not theirs."""
        return self.table.delete_endpoint(server_id, owner_id)

    def register_self(self, url: str, auth_token: str) -> None:
        """The stack's own endpoint, with the self-probe's key sealed (the SelfProbeKey custom resource, at deploy)."""
        sealed = self._seal(SELF_SERVER_ID, SELF_OWNER_ID, auth_token)
        self.table.register_endpoint(
            Endpoint(server_id=SELF_SERVER_ID, owner_id=SELF_OWNER_ID, name="this stack", url=url), sealed
        )

    def move_self(self, url: str) -> None:
        self.table.set_endpoint_url(SELF_SERVER_ID, url)

    def deregister_self(self) -> None:
        self.table.delete_endpoint(SELF_SERVER_ID, SELF_OWNER_ID)

    def stop_probes(self, server_id: str, failing_before: str, at: str) -> str | None:
        """Stop probing an endpoint failing since before `failing_before`; its owner when this call stopped it."""
        return self.table.stop_probes(server_id, failing_before, at)

    # -- reads ------------------------------------------------------------------
    def all_endpoints(self) -> Iterator[Endpoint]:
        """Every registered endpoint with its probe state (no tokens), from its own index: never a Scan."""
        return self.table.registered_endpoints()

    def list_for(self, owner_id: str) -> list[dict[str, Any]]:
        endpoints = self.table.endpoints_of(owner_id)
        return [{"serverId": e.server_id, "name": e.name, "url": e.url} for e in endpoints]

    def status(self, owner_id: str, server_id: str, window_seconds: int) -> dict[str, Any] | None:
        """Latest result, uptime over the window and the last schema change; None if not the owner's."""
        item = self.table.read_endpoint(server_id)
        if item is None or item.get("ownerId", {}).get("S") != owner_id:
            return None
        since = probed_at_text(datetime.now(UTC) - timedelta(seconds=window_seconds))
        results = [_result_view(r) for r in self.table.probe_results_since(server_id, since, MAX_STATUS_RESULTS)]
        up = sum(1 for r in results if r["status"] in (ProbeStatus.HEALTHY, ProbeStatus.DEGRADED))
        view: dict[str, Any] = {
            "serverId": server_id,
            "name": item["name"]["S"],
            "url": item["url"]["S"],
            "hasAuth": AUTH_CIPHERTEXT in item,
            "latest": results[-1] if results else self._latest(server_id),
            "uptime": {
                "windowSeconds": window_seconds,
                "probes": len(results),
                "up": up,
                "ratio": round(up / len(results), 4) if results else None,
            },
            "lastSchemaChange": None,
        }
        if "probesStoppedAt" in item:  # failing for too long: probed again once registered again
            view["probesStoppedAt"] = item["probesStoppedAt"]["S"]
        if "schemaHashSince" in item:
            view["lastSchemaChange"] = {
                "at": item["schemaHashSince"]["S"],
                "schemaHash": item.get("lastSchemaHash", {}).get("S"),
                "previousSchemaHash": item.get("previousSchemaHash", {}).get("S") or None,
            }
        return view

    def _latest(self, server_id: str) -> dict[str, Any] | None:
        item = self.table.latest_probe_result(server_id)
        return _result_view(item) if item else None


def _result_view(item: dict[str, Any]) -> dict[str, Any]:
    view: dict[str, Any] = {"status": item["status"]["S"], "probedAt": item["probedAt"]["S"]}
    for name in ("latencyMs", "toolCount"):
        if name in item:
            view[name] = int(float(item[name]["N"]))
    if "schemaHash" in item:
        view["schemaHash"] = item["schemaHash"]["S"]
    return view
