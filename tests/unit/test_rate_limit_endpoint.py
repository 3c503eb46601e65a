"""The endpoint counts each authenticated request against the caller's tier: requests admitted from this
instance's lease reach no DynamoDB, and a counter DynamoDB cannot reach refuses (503) rather than serve."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
from botocore.exceptions import ClientError, EndpointConnectionError
from starlette.testclient import TestClient

from mcp_backend.mcp.server import create_app
from tests.instants import minute_start
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


# The middle of a rate window (windows are aligned to the epoch minute): no request of a test crosses into the next.
MID_WINDOW = minute_start() + 30


class Background:
    """The lease-ahead executor, run when the test says: what the endpoint would do on a thread, in a known order."""

    def __init__(self) -> None:
        self.pending: list[Callable[[], None]] = []

    def __call__(self, lease: Callable[[], None]) -> None:
        self.pending.append(lease)

    def run_pending(self) -> None:
        while self.pending:
            self.pending.pop(0)()


def post_many(
    table: RateTable, count: int, background: Background | None = None, *, finish_background: bool = True
) -> list[httpx.Response]:
    """`count` requests of alice at one moment; after each, the lease ahead it started finishes (or, with
    finish_background False, none ever does)."""
    background = background or Background()
    app = create_app(
        SETTINGS,
        authenticator=EveryoneIsAlice(),
        client_factory=lambda service: table,
        rate_limit_clock=lambda: MID_WINDOW,
        lease_ahead=background,
    )
    answers = []
    with TestClient(app, base_url=f"https://{HOST}") as client:  # runs the lifespan: the SDK's task group
        for _ in range(count):
            answers.append(client.post("/mcp", json=PING, headers=HEADERS))
            if finish_background:
                background.run_pending()
    return answers


def leased_blocks(table: RateTable) -> list[int]:
    return [int(u["ExpressionAttributeValues"][":block"]["N"]) for u in table.updates]


def test_requests_within_a_lease_make_no_dynamodb_request():
    # Given the endpoint on a table that grants every lease, alice on the free tier (120 a minute, blocks of 12)
    table = RateTable()

    # When alice sends 24 requests within a minute, each lease ahead done before her next request
    answers = post_many(table, 24)

    # Then all are served from leases of 12: the first request's, and the next block leased ahead once half of a
    # block is left, after the 6th and the 18th
    assert {a.status_code for a in answers} == {200}
    assert leased_blocks(table) == [12, 12, 12]


def test_a_request_that_outruns_the_lease_ahead_leases_itself():
    # Given the endpoint on a table that grants every lease, and lease-aheads that never finish
    table = RateTable()
    background = Background()

    # When alice sends 24 requests
    answers = post_many(table, 24, background, finish_background=False)

    # Then the 1st and the 13th request leased a block themselves, the lease ahead started after the 6th is
    # still pending (one at a time), and every request was served
    assert {a.status_code for a in answers} == {200}
    assert leased_blocks(table) == [12, 12]
    assert len(background.pending) == 1


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
