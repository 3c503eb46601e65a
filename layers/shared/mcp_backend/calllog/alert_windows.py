"""AlertWindowTable's owner: at most one call-log alert per alert type and subject (tool, endpoint, function) per
window, whichever analyzer instance sends it, and the count of the ones suppressed in between.

One item per alert type and subject holds when its window ends and how many alerts it suppressed. Sending an alert
first tries to open a new window with one conditional `UpdateItem` (the condition: no window, or the last one has
ended), which returns the old item: its `suppressed` count goes into the alert that opens the new window. When the
condition fails, a window is open: the alert is not sent and the item's count goes up by one (`ADD`). Both are
single conditional writes, so concurrent instances never send two alerts for one window and never lose a count to
one another; a count in memory would limit nothing, each instance having its own.

When DynamoDB cannot be reached the alert is sent anyway, with no suppressed count: an operator gets a duplicate
rather than nothing. Items expire by TTL a day after their window ends (a suppressed count no later alert reports
goes with them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from mcp_backend.aws import botocore_errors, client_or_lazy

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

# How long an item outlives its window, so a later alert still finds what the window suppressed.
ITEM_TTL_AFTER_WINDOW_SECONDS = 86400


@dataclass(frozen=True)
class AlertDecision:
    send: bool
    # Alerts the previous window suppressed (for the alert that is sent); None when the table could not be read.
    suppressed_before: int | None


class AlertWindows:
    def __init__(self, table_name: str, window_seconds: int, client: DynamoDBClient | None = None) -> None:
        self.table_name = table_name
        self.window_seconds = window_seconds
        self._dynamodb = client_or_lazy(client, "dynamodb")

    def decide(self, alert: str, subject: str, now: float) -> AlertDecision:
        """Open the alert's window and send it, or count it as suppressed by the window already open.
        Raises botocore's ClientError (or a connection error) when the table cannot be written."""
        key = {"alertKey": {"S": f"{alert}#{subject}"}}
        ends = int(now) + self.window_seconds
        try:
            opened = self._dynamodb.update_item(
                TableName=self.table_name,
                Key=key,
                UpdateExpression="SET windowEndsAt = :ends, suppressed = :zero, expiresAt = :expires",
                ConditionExpression="attribute_not_exists(windowEndsAt) OR windowEndsAt <= :now",
                ExpressionAttributeValues={
                    ":ends": {"N": str(ends)},
                    ":zero": {"N": "0"},
                    ":expires": {"N": str(ends + ITEM_TTL_AFTER_WINDOW_SECONDS)},
                    ":now": {"N": str(int(now))},
                },
                ReturnValues="ALL_OLD",
            )
        except botocore_errors.ClientError as error:
            if error.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
                raise
        else:
            return AlertDecision(True, int(opened.get("Attributes", {}).get("suppressed", {}).get("N", "0")))
        # A window is open: count this alert in it (an item TTL deleted meanwhile is recreated with the count, no
        # window, so the next alert opens one and reports it).
        self._dynamodb.update_item(
            TableName=self.table_name,
            Key=key,
            UpdateExpression="ADD suppressed :one SET expiresAt = if_not_exists(expiresAt, :expires)",
            ExpressionAttributeValues={
                ":one": {"N": "1"},
                ":expires": {"N": str(ends + ITEM_TTL_AFTER_WINDOW_SECONDS)},
            },
        )
        return AlertDecision(False, None)
