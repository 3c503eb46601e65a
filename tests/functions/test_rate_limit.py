"""The request rate limit holds across instances: every endpoint instance counts in the same DynamoDB item."""

from __future__ import annotations

import boto3
import pytest

from mcp_backend.config import McpSettings, load_settings
from mcp_backend.ratelimit import RateLimitUnavailable, RequestRateLimiter


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def table_name(local) -> str:
    return local.stack.function("McpServer").environment["RATE_LIMIT_TABLE_NAME"]


def test_two_instances_sharing_the_table_share_one_limit(table_name):
    # Given two limiter instances (two Lambda instances) on the template's table, a limit of 5 a minute
    clock = Clock(1_800_000_000.0)  # the start of a minute
    first = RequestRateLimiter(table_name, boto3.client("dynamodb"), clock)
    second = RequestRateLimiter(table_name, boto3.client("dynamodb"), clock)

    # When one principal's requests alternate between them
    decisions = [(first if n % 2 else second).take("user-a", 5) for n in range(7)]

    # Then five are allowed in all, and the rest refused with the seconds left in the minute
    assert [d.allowed for d in decisions] == [True] * 5 + [False] * 2
    assert {d.retry_after_seconds for d in decisions[5:]} == {60}


def test_principals_and_windows_are_counted_apart(table_name):
    # Given a principal at its limit of 2, 45 s into a minute
    clock = Clock(1_800_000_045.0)
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
    clock = Clock(1_800_000_000.0)
    limiter = RequestRateLimiter(table_name, boto3.client("dynamodb"), clock)
    limiter.take("user-a", 1)
    limiter.take("user-a", 1)

    # When the table is read
    items = boto3.client("dynamodb").scan(TableName=table_name)["Items"]

    # Then one item counts the one allowed request and carries a TTL past its window
    assert len(items) == 1
    assert items[0]["requests"] == {"N": "1"}
    assert int(items[0]["expiresAt"]["N"]) > 1_800_000_060


def test_an_unreachable_table_fails_closed(aws):
    # Given a limiter on a table that does not exist
    limiter = RequestRateLimiter("no-such-table", boto3.client("dynamodb"))

    # Then taking a request raises (the guard answers 503), it is never allowed
    with pytest.raises(RateLimitUnavailable):
        limiter.take("user-a", 10)


def test_the_template_sets_the_limits_table_and_the_main_tier_limits(local):
    # Given McpServer's environment from the template
    settings = load_settings(McpSettings, local.stack.function("McpServer").environment)

    # Then its tiers read the parameters' defaults, and an unknown tier gets the free tier's limits
    assert settings.tier_limits("free").requests_per_minute == 120
    assert settings.tier_limits("free").endpoints == 3
    assert settings.tier_limits("pro").daily_jobs == 5000
    assert settings.tier_limits("gold") == settings.tier_limits("free")
