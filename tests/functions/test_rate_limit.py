"""The request rate limit holds across instances: every endpoint instance leases blocks of requests from the
same DynamoDB item, and admits its leased requests without a write."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from mcp_backend.config import McpSettings, load_settings
from mcp_backend.request_rate import RateDecision, RateLimitUnavailable, RequestRateLimiter, block_size
from tests.instants import minute_start

# Injected clocks start at the start of a minute of the real clock, never at a pinned date.
MINUTE = int(minute_start())


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def table_name(local) -> str:
    return local.stack.function("McpServer").environment["RATE_LIMIT_TABLE_NAME"]


def counted_client(writes: list[str]) -> Any:
    """A DynamoDB client that notes each UpdateItem it sends."""
    client = boto3.client("dynamodb")
    client.meta.events.register("before-call.dynamodb.UpdateItem", lambda **_: writes.append("UpdateItem"))
    return client


def admit(limiter: RequestRateLimiter, principal_id: str, limit: int) -> RateDecision:
    """As the endpoint asks: locally first, the shared counter only when this instance holds no lease."""
    return limiter.admit_locally(principal_id, limit) or limiter.take(principal_id, limit)


def stored_count(table_name: str, principal_id: str, window_start: int) -> int:
    key = {"id": {"S": f"requests#{principal_id}#{window_start}"}}
    item = boto3.client("dynamodb").get_item(TableName=table_name, Key=key).get("Item", {})
    return int(item.get("requests", {}).get("N", "0"))


def test_two_instances_sharing_the_table_share_one_limit(table_name):
    # Given two limiter instances (two Lambda instances) on the template's table, a limit of 5 a minute
    clock = Clock(MINUTE)  # the start of a minute
    first = RequestRateLimiter(table_name, boto3.client("dynamodb"), clock)
    second = RequestRateLimiter(table_name, boto3.client("dynamodb"), clock)

    # When one principal's requests alternate between them
    decisions = [(first if n % 2 else second).take("user-a", 5) for n in range(7)]

    # Then five are allowed in all, and the rest refused with the seconds left in the minute
    assert [d.allowed for d in decisions] == [True] * 5 + [False] * 2
    assert {d.retry_after_seconds for d in decisions[5:]} == {60}


def test_principals_and_windows_are_counted_apart(table_name):
    # Given a principal at its limit of 2, 45 s into a minute
    clock = Clock(MINUTE + 45)
    limiter = RequestRateLimiter(table_name, boto3.client("dynamodb"), clock)
    assert [limiter.take("user-a", 2).allowed for _ in range(2)] == [True, True]

    # When it asks again, another principal asks, and the next minute begins
    refused = limiter.take("user-a", 2)
    other = limiter.take("user-b", 2)
    clock.now += 15
    next_minute = limiter.take("user-a", 2)

    # Then only the first is refused, with 15 s to wait; the others are allowed
    assert (refused.allowed, refused.retry_after_seconds) == (False, 15)
    assert other.allowed and next_minute.allowed


def test_a_refused_request_writes_nothing_and_items_expire(table_name):
    # Given a principal refused once at its limit of 1
    clock = Clock(MINUTE)
    limiter = RequestRateLimiter(table_name, boto3.client("dynamodb"), clock)
    limiter.take("user-a", 1)
    limiter.take("user-a", 1)

    # When the table is read
    items = boto3.client("dynamodb").scan(TableName=table_name)["Items"]

    # Then one item counts the one allowed request and carries a TTL past its window
    assert len(items) == 1
    assert items[0]["requests"] == {"N": "1"}
    assert int(items[0]["expiresAt"]["N"]) > MINUTE + 60


def test_a_hostile_tenant_spread_over_instances_never_exceeds_its_limit(table_name):
    # Given four endpoint instances on the template's table and a tier of 37 a minute (blocks of 4)
    clock = Clock(MINUTE)
    instances = [RequestRateLimiter(table_name, boto3.client("dynamodb"), clock) for _ in range(4)]
    limit = 37

    # When one principal sends 200 requests at once, spread over the instances, eight at a time
    with ThreadPoolExecutor(max_workers=8) as pool:
        decisions = list(pool.map(lambda n: admit(instances[n % 4], "mallory", limit), range(200)))

    # Then no more than the limit are admitted in all, and at most a block less one per instance is lost;
    # DynamoDB never counts past the limit
    admitted = sum(d.allowed for d in decisions)
    assert limit - 4 * (block_size(limit) - 1) <= admitted <= limit
    assert stored_count(table_name, "mallory", MINUTE) <= limit
    assert 60 in {d.retry_after_seconds for d in decisions if not d.allowed}
    assert {d.retry_after_seconds for d in decisions if not d.allowed} <= {1, 60}  # 1: lost a race, not spent


class ContendedTable:
    """A RateLimitTable where other instances always lease first: each lease finds one request left, then none
    taken by it, as if another instance took it in between."""

    def __init__(self) -> None:
        self.updates = 0

    def update_item(self, **request: Any) -> dict[str, Any]:
        self.updates += 1
        error = {"Code": "ConditionalCheckFailedException", "Message": "The conditional request failed"}
        raise ClientError({"Error": error, "Item": {"requests": {"N": "9"}}}, "UpdateItem")


def test_a_lease_lost_to_other_instances_again_and_again_refuses_briefly_without_spending_the_window():
    # Given a table where every lease loses a race (limit 10, one request always seemingly left)
    table = ContendedTable()
    limiter = RequestRateLimiter("rates", table, Clock(MINUTE))

    # When a request asks twice
    first, second = admit(limiter, "user-a", 10), admit(limiter, "user-a", 10)

    # Then each is refused with a retry in a second after a bounded number of writes, and the second tried again
    assert (first.allowed, first.retry_after_seconds) == (False, 1)
    assert (second.allowed, second.retry_after_seconds) == (False, 1)
    assert table.updates == 6


def test_an_instance_writes_once_per_block_and_not_again_once_the_window_is_spent(table_name):
    # Given one instance and the free tier's 120 a minute (blocks of 12)
    writes: list[str] = []
    limiter = RequestRateLimiter(table_name, counted_client(writes), Clock(MINUTE))

    # When the principal sends its 120 requests, then 50 more
    within = [admit(limiter, "user-a", 120) for _ in range(120)]
    writes_within = len(writes)
    beyond = [admit(limiter, "user-a", 120) for _ in range(50)]

    # Then the 120 cost ten writes (one per block); the 50 are refused after one write finds the window spent
    assert all(d.allowed for d in within) and not any(d.allowed for d in beyond)
    assert block_size(120) == 12
    assert writes_within == 10
    assert len(writes) == 11


def test_the_last_lease_of_a_window_takes_what_is_left(table_name):
    # Given two instances and a limit of 25 (blocks of 3); the first instance leases 8 blocks (24)
    clock = Clock(MINUTE)
    first = RequestRateLimiter(table_name, boto3.client("dynamodb"), clock)
    second = RequestRateLimiter(table_name, boto3.client("dynamodb"), clock)
    assert all(admit(first, "user-a", 25).allowed for _ in range(22))

    # When the second instance asks for a block while only one request is left
    decisions = [admit(second, "user-a", 25) for _ in range(3)]

    # Then it leases the one left and refuses the rest; DynamoDB counts exactly the limit
    assert [d.allowed for d in decisions] == [True, False, False]
    assert stored_count(table_name, "user-a", MINUTE) == 25


def test_a_new_window_leases_anew_and_unused_leases_of_the_old_one_are_lost(table_name):
    # Given an instance that used 1 of a lease of 2 (limit 20) and was refused by another's spent window
    clock = Clock(MINUTE + 50)
    limiter = RequestRateLimiter(table_name, boto3.client("dynamodb"), clock)
    assert admit(limiter, "user-a", 20).allowed
    spent = RequestRateLimiter(table_name, boto3.client("dynamodb"), clock)
    assert admit(spent, "user-b", 1).allowed
    refused = admit(spent, "user-b", 1)

    # When the next minute begins and both principals ask again
    clock.now += 10
    again_a = admit(limiter, "user-a", 20)
    again_b = admit(spent, "user-b", 1)

    # Then the refusal waited for the window's end; the new window admits both with new leases, and the
    # old window keeps its lease of 2 counted (one went unused: lost, the limiter errs on refusing)
    assert (refused.allowed, refused.retry_after_seconds) == (False, 10)
    assert again_a.allowed and again_b.allowed
    assert stored_count(table_name, "user-a", MINUTE) == 2
    assert stored_count(table_name, "user-a", MINUTE + 60) == 2
    assert stored_count(table_name, "user-b", MINUTE + 60) == 1


def test_an_unreachable_table_fails_closed(aws):
    # Given a limiter on a table that does not exist
    limiter = RequestRateLimiter("no-such-table", boto3.client("dynamodb"))

    # Then taking a request raises (the guard answers 503), it is never allowed, and no lease is assumed
    for _ in range(2):
        with pytest.raises(RateLimitUnavailable):
            admit(limiter, "user-a", 10)


def test_the_template_sets_the_limits_table_and_the_main_tier_limits(local):
    # Given McpServer's environment from the template
    settings = load_settings(McpSettings, local.stack.function("McpServer").environment)

    # Then its tiers read the parameters' defaults, and an unknown tier gets the free tier's limits
    assert settings.tier_limits("free").requests_per_minute == 120
    assert settings.tier_limits("free").endpoints == 3
    assert settings.tier_limits("pro").daily_jobs == 5000
    assert settings.tier_limits("gold") == settings.tier_limits("free")


def test_an_instance_that_leases_ahead_keeps_requests_off_dynamodb_and_never_passes_the_limit(table_name):
    # Given an instance that leases the next block when half of one is left (run inline here), the free
    # tier's 120 a minute (blocks of 12)
    writes: list[str] = []
    limiter = RequestRateLimiter(table_name, counted_client(writes), Clock(MINUTE), lease_ahead=lambda lease: lease())

    # When the principal sends 130 requests, each asking locally first as the endpoint does
    waited = 0
    decisions = []
    for _ in range(130):
        decision = limiter.admit_locally("user-a", 120)
        if decision is None:
            waited += 1
            decision = limiter.take("user-a", 120)
        decisions.append(decision)

    # Then only the first request waited for a lease; exactly the limit was admitted, and DynamoDB counts it
    assert waited == 1
    assert sum(d.allowed for d in decisions) == 120
    assert stored_count(table_name, "user-a", MINUTE) == 120
    # and the leases were the ten blocks plus the one write that found the window spent
    assert len(writes) == 11


def test_a_lease_ahead_that_fails_leaves_the_next_request_to_lease_and_fail_closed():
    # Given an instance leasing ahead on a table that grants one lease of 2 (limit 20), then fails
    class FailingAfterOne:
        def __init__(self) -> None:
            self.updates = 0

        def update_item(self, **request: Any) -> dict[str, Any]:
            self.updates += 1
            if self.updates > 1:
                raise ClientError({"Error": {"Code": "ThrottlingException", "Message": "slow"}}, "UpdateItem")
            return {}

    table = FailingAfterOne()
    limiter = RequestRateLimiter("rates", table, Clock(MINUTE), lease_ahead=lambda lease: lease())

    # When three requests arrive: the lease's two, then one more
    first, second = admit(limiter, "user-a", 20), admit(limiter, "user-a", 20)

    # Then the two are admitted (the failed leases ahead changed nothing), and the third raises (the guard's 503)
    assert first.allowed and second.allowed
    with pytest.raises(RateLimitUnavailable):
        admit(limiter, "user-a", 20)
    # the first request's lease, the lease ahead once the second used half the block (failed), the third's own
    assert table.updates == 3


class SteppingClock(Clock):
    """A clock that moves on by `step` seconds each time it is read: requests arriving at a steady rate."""

    def __init__(self, now: float, step: float) -> None:
        super().__init__(now)
        self.step = step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def leased_sizes(writes: list[dict[str, Any]]) -> list[int]:
    return [int(write["ExpressionAttributeValues"][":block"]["N"]) for write in writes]


def test_a_busy_principal_is_leased_a_second_of_its_rate_and_a_slow_one_a_block(table_name):
    # Given a tier of 6,000 a minute (blocks of 50, a tenth is 600) and an instance that leases ahead inline
    def recording_limiter(clock: Clock, leases: list[dict[str, Any]]) -> RequestRateLimiter:
        client = boto3.client("dynamodb")
        client.meta.events.register(
            "provide-client-params.dynamodb.UpdateItem", lambda params, **_: leases.append(params)
        )
        return RequestRateLimiter(table_name, client, clock, lease_ahead=lambda lease: lease())

    busy_leases: list[dict[str, Any]] = []
    slow_leases: list[dict[str, Any]] = []
    # clocks read about twice a request: 400 requests a second, and 2 a second
    busy = recording_limiter(SteppingClock(MINUTE, 0.00125), busy_leases)
    slow = recording_limiter(SteppingClock(MINUTE, 0.25), slow_leases)

    # When the busy principal sends 1,000 requests and the slow one 100, each asking locally first
    busy_decisions = [admit(busy, "busy", 6000) for _ in range(1000)]
    slow_decisions = [admit(slow, "slow", 6000) for _ in range(100)]

    # Then all are admitted; the busy one's leases ahead grow to about a second of its rate (400), never past a
    # tenth of the limit, so it costs 4 writes instead of 20; the slow one leases blocks of 50
    assert all(d.allowed for d in busy_decisions + slow_decisions)
    sizes = leased_sizes(busy_leases)
    assert sizes[0] == 50 and all(350 <= size <= 600 for size in sizes[1:])
    assert len(sizes) <= 5
    assert set(leased_sizes(slow_leases)) == {50}
    # and DynamoDB counts exactly what was leased
    assert stored_count(table_name, "busy", MINUTE) == sum(sizes)


def test_a_lease_ahead_never_takes_more_than_a_tenth_of_the_limit_nor_passes_it(table_name):
    # Given a tier of 1,000 a minute (blocks of 50, a tenth is 100) and a frozen clock: the fastest rate
    writes: list[str] = []
    limiter = RequestRateLimiter(table_name, counted_client(writes), Clock(MINUTE), lease_ahead=lambda lease: lease())

    # When the principal sends 1,100 requests
    decisions = [admit(limiter, "user-a", 1000) for _ in range(1100)]

    # Then exactly the limit is admitted: a block of 50, nine leases of 100, the last 50 (a refused lease of 100,
    # then what is left), and one write that finds the window spent
    assert sum(d.allowed for d in decisions) == 1000
    assert stored_count(table_name, "user-a", MINUTE) == 1000
    assert len(writes) == 13
