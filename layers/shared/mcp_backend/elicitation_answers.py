"""Answers to the questions a 2025-era tool call asks on its open event stream (`elicitation/create`), carried
from the execution environment that receives the client's answer to the one whose call waits for it:
RateLimitTable's `elicit#<request id>` items (its counters are request_rate.py's, its slots call_slots.py's).

Every operation is one conditional UpdateItem, the only action McpServer has on the table: the waiting call opens
its item (owner, expiry), the answer is written onto it once (the same owner, not expired, not answered yet, size
capped) and the waiting call takes it off (REMOVE with the old value returned). DynamoDB's TTL removes the items
later (`expiresAt`); until then the expiry in each condition is what counts.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from mcp_backend.aws import botocore_errors, client_or_lazy
from mcp_backend.request_rate import RateLimitUnavailable

# The largest answer kept (its JSON text): a form's answer is a few fields, and an item holds at most 400 KB.
MAX_ANSWER_BYTES = 64 * 1024
KEY_PREFIX = "elicit#"


class NoSuchQuestion(Exception):
    """No question of this caller waits under this id (unknown, expired, another caller's, or already answered)."""


class AnswerMailbox:
    """One item per question a waiting call asked; see the module docstring."""

    def __init__(self, table_name: str, client: Any = None, clock: Callable[[], float] = time.time) -> None:
        self.table_name = table_name
        self._client = client_or_lazy(client, "dynamodb")
        self._clock = clock

    def open(self, request_id: str, owner: str, ttl_seconds: float) -> None:
        """A question `owner` waits for under `request_id` (new and unguessable), answerable for `ttl_seconds`."""
        self._update(
            request_id,
            "SET askedBy = :owner, expiresAt = :expires",
            "attribute_not_exists(askedBy)",
            {":owner": {"S": owner}, ":expires": {"N": str(int(self._clock() + ttl_seconds) + 1)}},
        )

    def deliver(self, request_id: str, owner: str, answer: str) -> None:
        """Write the client's answer (JSON text, at most MAX_ANSWER_BYTES, checked by the caller) onto the
        question; NoSuchQuestion when none of this owner's waits under that id."""
        try:
            self._update(
                request_id,
                "SET answer = :answer",
                "askedBy = :owner AND expiresAt > :now AND attribute_not_exists(answer)",
                {":owner": {"S": owner}, ":now": {"N": str(int(self._clock()))}, ":answer": {"S": answer}},
            )
        except _ConditionFailed:
            raise NoSuchQuestion(request_id) from None

    def take(self, request_id: str) -> str | None:
        """The answer, once, when it has arrived; None while it has not."""
        try:
            item = self._update(
                request_id, "REMOVE answer", "attribute_exists(answer)", {}, return_values="UPDATED_OLD"
            )
        except _ConditionFailed:
            return None
        return str(item["answer"]["S"])

    def close(self, request_id: str) -> None:
        """The call stopped waiting: a late answer is refused. Best effort (the expiry refuses it anyway)."""
        try:
            self._update(request_id, "SET expiresAt = :now", "attribute_exists(askedBy)", {":now": {"N": "0"}})
        except (_ConditionFailed, RateLimitUnavailable):
            return

    def _update(
        self,
        request_id: str,
        expression: str,
        condition: str,
        values: dict[str, Any],
        return_values: str = "NONE",
    ) -> dict[str, Any]:
        request: dict[str, Any] = {
            "TableName": self.table_name,
            "Key": {"id": {"S": KEY_PREFIX + request_id}},
            "UpdateExpression": expression,
            "ConditionExpression": condition,
            "ReturnValues": return_values,
        }
        if values:
            request["ExpressionAttributeValues"] = values
        try:
            response = self._client.update_item(**request)
        except botocore_errors.ClientError as error:
            if error.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException":
                raise _ConditionFailed from None
            raise RateLimitUnavailable(type(error).__name__) from None
        except botocore_errors.BotoCoreError as error:
            raise RateLimitUnavailable(type(error).__name__) from None
        return dict(response.get("Attributes", {}))


class _ConditionFailed(Exception):
    pass
