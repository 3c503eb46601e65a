"""One algorithm for every count shared by all instances: a block of a limit leased with one conditional write.

An instance adds a block to the count's item (`ADD <counter> :block`) under the condition that the count stays
within the limit, then admits that many locally, without a write. A lease that would pass the limit is refused by
DynamoDB, which answers with the count: what is left (as `next_block` sizes it) is leased instead. The count is
the sum of every lease, so all instances together never admit more than the limit. Concurrent leases of other
instances can move the count each time: after `attempts` tries the lease is given up (the caller refuses this
request; the next one tries again). The request rate (request_rate.py) and the daily job quota (jobs/) use it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mcp_backend.aws import botocore_errors

ATTEMPTS = 3


@dataclass(frozen=True, slots=True)
class BlockLease:
    """What one lease got: `taken` of the limit (0: the count is at the limit), leaving the count at `counted`."""

    taken: int
    counted: int


def lease_block(
    client: Any,
    table_name: str,
    key: dict[str, Any],
    counter: str,
    limit: int,
    block: int,
    expires: int,
    next_block: Callable[[int], int],
    attempts: int = ATTEMPTS,
) -> BlockLease | None:
    """Lease up to `block` of `limit` on the item at `key`, kept until `expires` (epoch seconds, set by the first
    lease); None when the count kept moving under concurrent leases. `next_block(counted)` sizes the retry once
    DynamoDB has said what is counted. Other DynamoDB failures raise as botocore raises them."""
    for _ in range(attempts):
        try:
            response = client.update_item(
                TableName=table_name,
                Key=key,
                UpdateExpression=f"ADD {counter} :block SET expiresAt = if_not_exists(expiresAt, :expires)",
                ConditionExpression=f"attribute_not_exists({counter}) OR {counter} <= :room",
                ExpressionAttributeValues={
                    ":block": {"N": str(block)},
                    ":room": {"N": str(limit - block)},
                    ":expires": {"N": str(expires)},
                },
                ReturnValues="UPDATED_NEW",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except botocore_errors.ClientError as error:
            if error.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
                raise
            old: dict[str, Any] = error.response.get("Item") or {}  # type: ignore[assignment]
            counted = int(old.get(counter, {}).get("N", limit))
            block = min(limit - counted, next_block(counted))
            if block <= 0:
                return BlockLease(0, counted)
            continue
        attributes = (response or {}).get("Attributes", {})
        return BlockLease(block, int(attributes.get(counter, {}).get("N", 0)))
    return None
