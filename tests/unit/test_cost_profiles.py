"""The idle bill per profile: every always-on line is priced (the call-log stream on-demand or provisioned, the
alarms, the dashboard, the keys, the secret), and a part that is off adds no line."""

from __future__ import annotations

import pytest

from tests.cost.figures import Measurement, UnitFigures
from tests.cost.model import HOURS_PER_MONTH, idle_line_items, load_prices, total
from tests.cost.profiles import idle_shape
from tests.profiles import profile_parameters

PRICES = load_prices()
FIRINGS_PER_HOUR = 60.0  # the default schedule, rate(1 minute)


def measurement() -> Measurement:
    """A measured idle firing (one ProbeDispatcher invocation, one query), as `make cost` records it."""
    firing = UnitFigures(
        name="idle schedule",
        description="every schedule fires once",
        requests={"dynamodb:Query": 1.0},
        kinesis_records=0.0,
        kinesis_bytes=0.0,
        invocations={"ProbeDispatcher": 1.0},
        median_ms={"ProbeDispatcher": 10.0},
        log_bytes=0.0,
        per_hour=FIRINGS_PER_HOUR,
    )
    return Measurement(
        units={"idle schedule": firing},
        memory_mb={"ProbeDispatcher": 512},
        resources={},
        parameters={},
        idle_long_polls_per_hour=0.0,
        log_retention_days=[30],
        repetitions=1,
    )


def idle(**parameters: str) -> dict[str, float | None]:
    items = idle_line_items(measurement(), PRICES, idle_shape(parameters, FIRINGS_PER_HOUR))
    return {item.what: item.usd for item in items}


def test_the_full_profile_prices_the_on_demand_stream_the_alarms_the_dashboard_the_key_and_the_secrets():
    # Given the full profile's idle month
    lines = idle(**profile_parameters("full"))
    # Then the on-demand stream is billed every hour of the month at the stream-hour price
    assert lines["Kinesis stream-hours (on-demand)"] == pytest.approx(HOURS_PER_MONTH * 0.04)
    # And each alarm, the dashboard, the endpoint-token key and the two secrets (API keys, request state; the
    # edge's is off in this profile) have a price
    assert lines["CloudWatch alarms"] == pytest.approx(23 * 0.10)
    assert lines["CloudWatch dashboards"] == pytest.approx(3.00)
    assert lines["KMS keys"] == pytest.approx(1.00)
    assert lines["Secrets Manager secrets"] == pytest.approx(2 * 0.40)


def test_a_provisioned_call_log_bills_one_shard_instead_of_the_stream_hour():
    # Given the full profile with the call log provisioned at one shard
    lines = idle(**{**profile_parameters("full"), "CallLogStreamMode": "PROVISIONED", "CallLogShardCount": "1"})
    # Then one shard-hour per hour is billed, and no on-demand stream-hour
    assert lines["Kinesis shard-hours (provisioned, 1 shard)"] == pytest.approx(HOURS_PER_MONTH * 0.015)
    assert "Kinesis stream-hours (on-demand)" not in lines


def test_the_minimal_profile_has_no_stream_key_or_schedule_and_every_line_priced():
    # Given the minimal profile's idle month
    items = idle_line_items(measurement(), PRICES, idle_shape(profile_parameters("minimal"), FIRINGS_PER_HOUR))
    priced, missing = total(items)
    whats = [item.what for item in items]
    # Then no Kinesis line, no schedule firing, no KMS key is billed, and only the endpoint's and jobs' alarms
    assert not [what for what in whats if what.startswith(("Kinesis", "schedule"))]
    assert dict((item.what, item.quantity) for item in items)["KMS keys"] == 0
    assert dict((item.what, item.quantity) for item in items)["CloudWatch alarms"] == 9
    # And every line has a price: the total is the whole idle bill, far below the full profile's
    assert missing == []
    full, _ = total(idle_line_items(measurement(), PRICES, idle_shape(profile_parameters("full"), FIRINGS_PER_HOUR)))
    assert priced < 5 < 30 < full
