"""The endpoint counts each authenticated request against the caller's tier: requests admitted from this
instance's lease reach no DynamoDB, and a counter DynamoDB cannot reach refuses (503) rather than serve."""

from __future__ import annotations

from typing import Any

import httpx
from botocore.exceptions import ClientError, EndpointConnectionError
from starlette.testclient import TestClient

from mcp_backend.mcp.server import create_app
from tests.unit.endpoint_fakes import HOST, SETTINGS, EveryoneIsAlice

HEADERS = {
    "accept": "application/json, text/event-stream",
    "content-type": "application/json",
    "authorization": "Bearer key",
}
PING = {"jsonrpc": "2.0", "id": 1, "method": "ping"}


class RateTable:
    """A RateLimitTable that counts leases and fails the way it is told."""

    def __init__(self, failure: Exception | None = None) -> None:
        self.failure = failure
        self.updates: list[dict[str, Any]] = []

    def update_item(self, **request: Any) -> dict[str, Any]:
        self.updates.append(request)
        if self.failure is not None:
            raise self.failure
        return {}


def post_many(table: RateTable, count: int) -> list[httpx.Response]:
    app = create_app(SETTINGS, authenticator=EveryoneIsAlice(), client_factory=lambda service: table)
    with TestClient(app, base_url=f"https://{HOST}") as client:  # runs the lifespan: the SDK's task group
        return [client.post("/mcp", json=PING, headers=HEADERS) for _ in range(count)]


def test_requests_within_a_lease_make_no_dynamodb_request():
    # Given the endpoint on a table that grants every lease, alice on the free tier (120 a minute, blocks of 12)
    table = RateTable()

    # When alice sends 24 requests within a minute
    answers = post_many(table, 24)

    # Then all are served from leases of 12: the first request's, and the next block leased ahead (in the
    # background, once half of a block is used) after the 6th and the 18th (that one may still be under way)
    assert {a.status_code for a in answers} == {200}
    blocks = [u["ExpressionAttributeValues"][":block"] for u in table.updates]
    assert blocks in ([{"N": "12"}] * 2, [{"N": "12"}] * 3)


def test_a_counter_dynamodb_cannot_reach_or_throttles_refuses_with_503():
    for failure in (
        EndpointConnectionError(endpoint_url="https://dynamodb.us-east-1.amazonaws.com"),
        ClientError({"Error": {"Code": "ThrottlingException", "Message": "slow down"}}, "UpdateItem"),
    ):
        # Given the endpoint on a rate table that fails
        table = RateTable(failure)

        # When alice sends two requests
        answers = post_many(table, 2)

        # Then both are refused with 503 and a Retry-After (each tried the table again), no error text leaks
        assert [a.status_code for a in answers] == [503, 503]
        assert all(a.headers["retry-after"] == "5" for a in answers)
        assert all(a.json()["error"]["message"] == "Service Unavailable: try again shortly" for a in answers)
        assert len(table.updates) == 2
