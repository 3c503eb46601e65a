"""AuthorizationTable's owner: every record the authorization server keeps, one item per record, each with a
TTL (`expiresAt`, epoch seconds) so DynamoDB deletes what is no longer needed.

Keys (`pk`) by record kind:
- `client#<client id>`: a registered client's metadata (a secret by its sha256 only); its TTL moves forward
  when the client gets tokens (a registration unused for the idle period expires, and the client then gets
  `invalid_client`). An operator's client (`op-` id) does not expire;
- `operator#clients`: the ids of the operator's clients (a string set), so they can be listed;
- `txn#<id>`: an authorization request between /authorize, the upstream login and the consent form;
- `code#<sha256 of the code>`: an authorization code, consumed once by a conditional update;
- `refresh#<sha256 of the token>`: a refresh token, rotated once by a conditional update;
- `family#<id>`: one consent's grant (subject, client, when it started and ends, and another OIDC provider's
  refresh token for the re-check): its refresh tokens all name it and never outlive it; it expires at its
  absolute end, however often it was refreshed;
- `revoked#<family id>`: a grant revoked (reuse, revocation, the user gone upstream, an operator);
- `subject#<subject>`: the user's grants (a string set of family ids), so an operator can list and revoke
  them; it lives as long as the newest grant;
- `rate#<what>#<window>`: a fixed-window counter (registrations per source and in all, client metadata document
  fetches per source and per document host), counted with mcp_backend.block_leases one event at a time.

Codes and refresh tokens are stored by their sha256. The one usable secret is another provider's refresh
token (a grant's, and a login's transaction until consent, at most 10 minutes): the table is encrypted with
KMS and only the authorization server's role reads it (docs/security.md); revoking a grant drops it. TTL
deletion lags (up to a few days), so every read checks `expiresAt` itself.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from typing import Any

from mcp_backend.aws import botocore_errors, client_or_lazy
from mcp_backend.block_leases import lease_block

OPERATOR_CLIENTS = "operator#clients"
# An operator's client stays until the operator removes it (TTL needs a number: a century).
OPERATOR_CLIENT_SECONDS = 100 * 365 * 86400


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


class AuthorizationStore:
    def __init__(self, table_name: str, client: Any = None, clock: Callable[[], float] = time.time) -> None:
        self.table_name = table_name
        self.dynamodb = client_or_lazy(client, "dynamodb")
        self.clock = clock

    def put(self, key: str, data: dict[str, Any], ttl_seconds: float, *, new: bool = False) -> None:
        """Write a record living `ttl_seconds`; with `new`, only if no such record exists (False otherwise)."""
        item = {
            "pk": {"S": key},
            "data": {"S": json.dumps(data, separators=(",", ":"))},
            "expiresAt": {"N": str(int(self.clock() + ttl_seconds))},
        }
        extra = {"ConditionExpression": "attribute_not_exists(pk)"} if new else {}
        self.dynamodb.put_item(TableName=self.table_name, Item=item, **extra)

    def get(self, key: str) -> dict[str, Any] | None:
        """The record's data and flags (`used`, `revoked`), or None when absent or expired."""
        item = self.dynamodb.get_item(TableName=self.table_name, Key={"pk": {"S": key}}, ConsistentRead=True).get(
            "Item"
        )
        if item is None or int(item["expiresAt"]["N"]) <= self.clock():
            return None
        record: dict[str, Any] = json.loads(item["data"]["S"])
        record["_used"] = "used" in item
        return record

    def delete(self, key: str) -> None:
        self.dynamodb.delete_item(TableName=self.table_name, Key={"pk": {"S": key}})

    def mark_used(self, key: str) -> bool:
        """Flag a code or refresh token as spent: True for the one caller that flagged it, False for every later
        one (a replay). One conditional update, so two concurrent exchanges cannot both succeed."""
        return self._applied(
            Key={"pk": {"S": key}},
            UpdateExpression="SET #used = :now",
            ConditionExpression="attribute_exists(pk) AND attribute_not_exists(#used) AND expiresAt > :now",
            ExpressionAttributeNames={"#used": "used"},  # names, not words DynamoDB may reserve
            ExpressionAttributeValues={":now": {"N": str(int(self.clock()))}},
        )

    def touch(self, key: str, ttl_seconds: float) -> None:
        """Move a record's expiry forward (a client that got tokens stays registered)."""
        self.dynamodb.update_item(
            TableName=self.table_name,
            Key={"pk": {"S": key}},
            UpdateExpression="SET expiresAt = :expires",
            ConditionExpression="attribute_exists(pk)",
            ExpressionAttributeValues={":expires": {"N": str(int(self.clock() + ttl_seconds))}},
        )

    def count(self, key: str, window_seconds: int, limit: int) -> bool:
        """Count one event in the current fixed window: True while the count stays within `limit` (False too when
        concurrent counts kept the lease from landing: the caller refuses, the next event tries again)."""
        window = int(self.clock()) // window_seconds
        lease = lease_block(
            self.dynamodb,
            self.table_name,
            {"pk": {"S": f"rate#{key}#{window}"}},
            "hits",
            limit,
            1,
            (window + 2) * window_seconds,
            lambda counted: limit - counted,
        )
        return lease is not None and lease.taken > 0

    def window_left(self, window_seconds: int) -> int:
        """Seconds until the current fixed window of `count` ends (at least 1): a refusal's Retry-After."""
        return max(1, window_seconds - int(self.clock()) % window_seconds)

    # Grants

    def start_grant(
        self, family: str, subject: str, username: str, client_id: str, seconds: int, *, upstream_refresh: str = ""
    ) -> int:
        """Record a new grant ending `seconds` from now, indexed under its subject; its end (epoch seconds)."""
        started = int(self.clock())
        ends = started + seconds
        grant: dict[str, Any] = {
            "subject": subject,
            "username": username,
            "client_id": client_id,
            "started": started,
            "ends": ends,
        }
        if upstream_refresh:
            grant["upstream_refresh"] = upstream_refresh
        self.put(f"family#{family}", grant, seconds)
        self.dynamodb.update_item(
            TableName=self.table_name,
            Key={"pk": {"S": f"subject#{subject}"}},
            UpdateExpression="ADD families :family SET expiresAt = :ends",
            ExpressionAttributeValues={":family": {"SS": [family]}, ":ends": {"N": str(ends)}},
        )
        return ends

    def grant(self, family: str) -> dict[str, Any] | None:
        """A live grant's record (None once it ended), with `revoked` (the reason) when it was revoked."""
        record = self.get(f"family#{family}")
        if record is None:
            return None
        record.pop("_used", None)
        revoked = self.get(f"revoked#{family}")
        if revoked is not None:
            record["revoked"] = revoked.get("reason", "revoked")
        return record

    def keep_upstream_refresh(self, family: str, grant: dict[str, Any], refresh_token: str) -> None:
        """Replace the grant's upstream refresh token (the provider rotated it); the grant still ends as before."""
        self._rewrite_grant(family, {**grant, "upstream_refresh": refresh_token})

    def revoke_grant(self, family: str, reason: str, seconds: int) -> None:
        """Revoke a grant for `seconds` (its lifetime: nothing of it outlives that), dropping the upstream refresh
        token it kept: a revoked grant is never refreshed."""
        self.put(f"revoked#{family}", {"reason": reason}, seconds)
        grant = self.get(f"family#{family}")
        if grant is not None and grant.pop("upstream_refresh", None) is not None:
            self._rewrite_grant(family, grant)

    def _rewrite_grant(self, family: str, grant: dict[str, Any]) -> None:
        record = {key: value for key, value in grant.items() if key not in ("revoked", "_used")}
        self.put(f"family#{family}", record, max(1, int(record["ends"]) - int(self.clock())))

    def grants_of(self, subject: str) -> dict[str, dict[str, Any]]:
        """The subject's grants that have not ended, by family id."""
        item = self.dynamodb.get_item(
            TableName=self.table_name, Key={"pk": {"S": f"subject#{subject}"}}, ConsistentRead=True
        ).get("Item")
        if item is None:
            return {}
        families = sorted(item.get("families", {}).get("SS", []))
        return {family: grant for family in families if (grant := self.grant(family)) is not None}

    def revoke_subject(self, subject: str, reason: str) -> list[str]:
        """Revoke every live grant of the subject not revoked yet, each until its own end; their family ids."""
        now = int(self.clock())
        revoked = [(family, grant) for family, grant in self.grants_of(subject).items() if "revoked" not in grant]
        for family, grant in revoked:
            self.revoke_grant(family, reason, max(1, int(grant["ends"]) - now))
        return [family for family, _ in revoked]

    # The operator's clients

    def add_operator_client(self, client_id: str, metadata: dict[str, Any]) -> None:
        self.put(f"client#{client_id}", metadata, OPERATOR_CLIENT_SECONDS, new=True)
        self._set(OPERATOR_CLIENTS, "ADD", client_id)

    def operator_clients(self) -> dict[str, dict[str, Any]]:
        item = self.dynamodb.get_item(
            TableName=self.table_name, Key={"pk": {"S": OPERATOR_CLIENTS}}, ConsistentRead=True
        ).get("Item")
        ids = sorted(item.get("clients", {}).get("SS", [])) if item else []
        return {client_id: record for client_id in ids if (record := self.get(f"client#{client_id}")) is not None}

    def remove_operator_client(self, client_id: str) -> bool:
        """Remove one of the operator's clients: False when there is none of that id."""
        if client_id not in self.operator_clients():
            return False
        self.delete(f"client#{client_id}")
        self._set(OPERATOR_CLIENTS, "DELETE", client_id)
        return True

    def _set(self, key: str, verb: str, client_id: str) -> None:
        self.dynamodb.update_item(
            TableName=self.table_name,
            Key={"pk": {"S": key}},
            UpdateExpression=f"{verb} clients :id SET expiresAt = :never",
            ExpressionAttributeValues={
                ":id": {"SS": [client_id]},
                ":never": {"N": str(int(self.clock()) + OPERATOR_CLIENT_SECONDS)},
            },
        )

    def _applied(self, **update: Any) -> bool:
        """One conditional UpdateItem: True when DynamoDB applied it, False when its condition did not hold."""
        try:
            self.dynamodb.update_item(TableName=self.table_name, **update)
        except botocore_errors.ClientError as error:
            if error.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException":
                return False
            raise
        return True
