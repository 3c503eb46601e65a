"""Call-log alerts are deduplicated per alert type and subject within a window that every analyzer instance shares
(a conditional write on AlertWindowTable, not a counter in one instance's memory), and the next alert after a window
says how many were suppressed."""

from __future__ import annotations

import datetime as dt
import json

import pytest
import time_machine

from devstack.runtime.in_process import FunctionRuntime
from mcp_backend.calllog.models import CallLogEventType, CallLogRecord
from tests.functions import test_call_log_analyzer
from tests.functions.test_call_log_analyzer import ANALYZER, error, put_call_log, threshold
from tests.kinesis import delivered, lambda_event

alerts = test_call_log_analyzer.alerts  # the AlertTopic inbox fixture


@pytest.fixture
def start(local) -> dt.datetime:
    """Where each test's first burst happens: a little more than a window before the real now, so every later
    instant it travels to is in the past too. The alert inbox (SQS on moto) is read at the real clock and compares
    each message's send time with it (retention, visibility): a message sent at a pinned date would expire with
    the days, and one sent in the future would not be visible yet."""
    return dt.datetime.now(dt.UTC) - dt.timedelta(seconds=2 * window(local))


def window(local) -> int:
    return int(local.stack.function(ANALYZER).environment["ALERT_DEDUP_WINDOW_SECONDS"])


def burst(local, tool: str = "analyze_dataset") -> dict:
    """A batch of new records (new sequence numbers) with as many errors of `tool` as the threshold."""
    records = put_call_log(local, [error(tool) for _ in range(threshold(local))])
    return delivered(lambda_event(records, local.stack.ensure("CallLogStream").attributes["Arn"]), ANALYZER)


def new_instance(local) -> FunctionRuntime:
    """Another execution environment of the analyzer: its own import of the handler, nothing shared in memory."""
    return FunctionRuntime(local.stack.function(ANALYZER), local.stack.region)


def test_alerts_of_one_type_and_tool_are_sent_once_per_window_across_instances_with_the_suppressed_count(
    local, alerts, start
):
    # Given bursts of one tool's errors, each crossing the threshold, handled by different analyzer instances
    seconds = window(local)
    assert seconds >= 300

    # When the first instance handles one
    with time_machine.travel(start, tick=False):
        new_instance(local).invoke(burst(local))
    # Then one alert, with nothing suppressed before it
    (first,) = alerts()
    assert (first["alert"], first["tool"], first["suppressedSinceLastAlert"]) == (
        "error_threshold_crossed",
        "analyze_dataset",
        0,
    )
    assert first["alertWindowSeconds"] == seconds

    # When two other instances handle two more bursts within the window
    for offset in (60, seconds - 1):
        with time_machine.travel(start + dt.timedelta(seconds=offset), tick=False):
            assert new_instance(local).invoke(burst(local)) == {"batchItemFailures": []}
    # Then no alert is sent
    assert alerts() == []

    # When another tool crosses the threshold within the window
    with time_machine.travel(start + dt.timedelta(seconds=120), tick=False):
        new_instance(local).invoke(burst(local, "list_datasets"))
    # Then it alerts: the window is per tool
    assert [(a["tool"], a["suppressedSinceLastAlert"]) for a in alerts()] == [("list_datasets", 0)]

    # When a burst comes once the window has passed
    with time_machine.travel(start + dt.timedelta(seconds=seconds), tick=False):
        new_instance(local).invoke(burst(local))
    # Then it alerts, saying two alerts were suppressed since the last one
    (after,) = alerts()
    assert (after["tool"], after["suppressedSinceLastAlert"]) == ("analyze_dataset", 2)


def drift(local, server_id: str, owner: str | None = None) -> dict:
    """A batch of one schema drift of an endpoint (of `owner`, as the drift detector names it)."""
    record = CallLogRecord(
        event_type=CallLogEventType.SCHEMA_DRIFT,
        server_id=server_id,
        user_id=owner,
        schema_hash="b",
        previous_schema_hash="a",
    )
    records = put_call_log(local, [record], partition_key=f"server#{server_id}")
    return delivered(lambda_event(records, local.stack.ensure("CallLogStream").attributes["Arn"]), ANALYZER)


def test_a_schema_drift_is_not_suppressed_by_another_endpoints_or_another_types_alert(local, alerts, start):
    # Given a tool's error alert just sent, then schema drifts of two endpoints
    with time_machine.travel(start, tick=False):
        new_instance(local).invoke(burst(local))
        alerts()
        # When both drifts are handled within the window
        new_instance(local).invoke(drift(local, "srv-a"))
        new_instance(local).invoke(drift(local, "srv-b"))

    # Then each endpoint's drift alerts
    assert sorted((a["alert"], a["server"]) for a in alerts()) == [
        ("schema_drift", "srv-a"),
        ("schema_drift", "srv-b"),
    ]


def test_one_owners_endpoints_alert_once_per_window_and_the_next_alert_counts_the_rest(local, alerts, start):
    # Given a tenant with many endpoints (each its own subject) and another tenant
    seconds = window(local)

    # When three of the first tenant's endpoints and one of the other's drift within one window
    with time_machine.travel(start, tick=False):
        for server_id, owner in (("srv-a1", "user-a"), ("srv-a2", "user-a"), ("srv-b1", "user-b")):
            new_instance(local).invoke(drift(local, server_id, owner))
    with time_machine.travel(start + dt.timedelta(seconds=60), tick=False):
        new_instance(local).invoke(drift(local, "srv-a3", "user-a"))

    # Then each tenant gets one alert, nothing suppressed before it, and no alert names a tenant
    sent = alerts()
    assert sorted((a["server"], a["suppressedForOwnerSinceLastAlert"]) for a in sent) == [("srv-a1", 0), ("srv-b1", 0)]
    assert not any("user-" in json.dumps(a) for a in sent)

    # When another of the first tenant's endpoints drifts once the window has passed
    with time_machine.travel(start + dt.timedelta(seconds=seconds), tick=False):
        new_instance(local).invoke(drift(local, "srv-a4", "user-a"))

    # Then it alerts, saying the tenant's two other drifts were suppressed since its last alert
    (after,) = alerts()
    assert (after["server"], after["suppressedForOwnerSinceLastAlert"]) == ("srv-a4", 2)


@pytest.fixture
def unavailable_windows(monkeypatch):
    """AlertWindowTable refusing every write (throttled)."""
    from moto.dynamodb.models import DynamoDBBackend

    real = DynamoDBBackend.update_item

    def throttled(self, table_name, *args, **kwargs):
        if "AlertWindow" in table_name:
            raise RuntimeError("throttled")
        return real(self, table_name, *args, **kwargs)

    monkeypatch.setattr(DynamoDBBackend, "update_item", throttled)


def test_an_unreadable_window_sends_the_alert_rather_than_lose_it(local, alerts, unavailable_windows, start):
    # Given AlertWindowTable unavailable / When two bursts come within the window
    for offset in (0, 60):
        with time_machine.travel(start + dt.timedelta(seconds=offset), tick=False):
            assert new_instance(local).invoke(burst(local)) == {"batchItemFailures": []}

    # Then both alert (an operator gets a duplicate rather than nothing), without a suppressed count
    sent = alerts()
    assert len(sent) == 2 and all(a["suppressedSinceLastAlert"] is None for a in sent)
