"""Requests per minute per principal, held across every instance of the endpoint: RateLimitTable's owner.

One item per principal and minute (a fixed window aligned to the epoch minute). Counting a request is one
`UpdateItem` that ADDs 1 under the condition that the count is below the tier's limit, so the check and the
count are one atomic write in DynamoDB whatever instance serves the request; a refused request changes
nothing and learns when the window ends (the 429's Retry-After). Items expire by TTL a few minutes after
their window. A fixed window lets a client spend its limit at the end of one minute and again at the start of
the next (at most twice the limit over any 60 s), which is the usual price of one write per request.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from mcp_backend.aws import client_or_lazy

WINDOW_SECONDS = 60
# Kept past its window so a late request of the window still finds it; DynamoDB deletes expired items
# within a few days of expiry, and counts only the live window (the key names the window).
ITEM_TTL_SECONDS = 5 * WINDOW_SECONDS


@dataclass(frozen=True)
class RateDecision:
    allowed: bool
    limit: int
    retry_after_seconds: int = 0  # refused: seconds until the window ends (at least 1)


class RateLimitUnavailable(RuntimeError):
    """The counter could not be read or written: the endpoint refuses (503) rather than serve unlimited."""


class RequestRateLimiter:
    def __init__(self, table_name: str, client: Any = None, clock: Callable[[], float] = time.time) -> None:
        self.table_name = table_name
        self._client = client_or_lazy(client, "dynamodb")
        self._clock = clock

    def take(self, principal_id: str, limit: int) -> RateDecision:
        """Count one request of `principal_id` in the current minute, unless `limit` are counted already."""
        now = self._clock()
        window_start = int(now // WINDOW_SECONDS) * WINDOW_SECONDS
        try:
            self._client.update_item(
                TableName=self.table_name,
                Key={"id": {"S": f"requests#{principal_id}#{window_start}"}},
                UpdateExpression="ADD requests :one SET expiresAt = if_not_exists(expiresAt, :expires)",
                ConditionExpression="attribute_not_exists(requests) OR requests < :limit",
                ExpressionAttributeValues={
                    ":one": {"N": "1"},
                    ":limit": {"N": str(limit)},
                    ":expires": {"N": str(window_start + ITEM_TTL_SECONDS)},
                },
            )
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException":
                retry_after = max(1, math.ceil(window_start + WINDOW_SECONDS - now))
                return RateDecision(allowed=False, limit=limit, retry_after_seconds=retry_after)
            raise RateLimitUnavailable(error.response.get("Error", {}).get("Code", "ClientError")) from None
        except BotoCoreError as error:
            raise RateLimitUnavailable(type(error).__name__) from None
        return RateDecision(allowed=True, limit=limit)
