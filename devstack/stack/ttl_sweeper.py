"""DynamoDB's Time to Live on moto, which does not run it: items whose TTL attribute has passed are deleted by a
sweep, and the deletes are remembered so the table's stream marks their REMOVE records the way DynamoDB marks its
own TTL deletes (devstack.sources.streams)."""

from __future__ import annotations

import datetime as dt
import json
import threading
from collections.abc import Callable
from typing import Any

from devstack.stack.resources import LocalStack


class TtlSweeper:
    def __init__(self, stack: LocalStack, client: Callable[[str], Any], clock: Callable[[], dt.datetime]) -> None:
        self._stack = stack
        self._client = client
        self._clock = clock
        self._next_expiry: float | None = None  # the earliest TTL still in the future, as of the last sweep
        self._deleted: set[str] = set()
        self._lock = threading.Lock()

    def sweep(self) -> int:
        """Delete items whose TTL attribute has passed, as DynamoDB's TTL process does."""
        deleted = 0
        now = self._clock().timestamp()
        next_expiry: float | None = None
        dynamodb = self._client("dynamodb")
        for logical_id, properties in self._stack.active("AWS::DynamoDB::Table").items():
            ttl = properties.get("TimeToLiveSpecification", {})
            if not ttl.get("Enabled"):
                continue
            table = self._stack.ensure(logical_id).ref
            keys = [k["AttributeName"] for k in properties["KeySchema"]]
            for page in dynamodb.get_paginator("scan").paginate(TableName=table):
                for item in page["Items"]:
                    expires = item.get(ttl["AttributeName"], {}).get("N")
                    if expires is None:
                        continue
                    if float(expires) > now:
                        next_expiry = min(float(expires), next_expiry or float(expires))
                        continue
                    key = {name: item[name] for name in keys}
                    with self._lock:
                        self._deleted.add(_key_id(key))
                    dynamodb.delete_item(TableName=table, Key=key)
                    deleted += 1
        self._next_expiry = next_expiry
        return deleted

    def was_ttl_delete(self, keys: dict[str, Any]) -> bool:
        # Kept, not consumed: every mapping on the stream reads the same REMOVE record.
        with self._lock:
            return _key_id(keys) in self._deleted

    def until_next_expiry(self) -> float | None:
        """Seconds until the next item known to expire does (None: none is known)."""
        expiry = self._next_expiry
        return None if expiry is None else max(0.0, expiry - self._clock().timestamp())


def _key_id(keys: dict[str, Any]) -> str:
    return json.dumps(keys, sort_keys=True)
