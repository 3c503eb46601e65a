"""AlertHandler's FilterCriteria on ProbeAlertQueue, read from template.yaml, against the OnSuccess
envelopes as they arrive after the fan-out (the result sits under body.responsePayload)."""

from __future__ import annotations

import json

import pytest

from devstack.sources.filters import RecordFilter
from devstack.stack.template import load_template
from tests.conftest import load_event

RESOURCES = load_template().resources()


def alert_queue_filter() -> RecordFilter:
    [mapping] = [
        r["Properties"]
        for r in RESOURCES.values()
        if r["Type"] == "AWS::Lambda::EventSourceMapping"
        and r["Properties"]["EventSourceArn"] == {"Fn::GetAtt": ["ProbeAlertQueue", "Arn"]}
    ]
    return RecordFilter(mapping["FilterCriteria"])


@pytest.mark.parametrize(
    ("fixture", "passes"),
    [
        ("alert_handler/success-healthy.json", False),
        ("alert_handler/success-degraded-fast.json", False),
        ("alert_handler/success-degraded-slow.json", True),
        ("alert_handler/success-error.json", True),
    ],
)
def test_only_errors_and_slow_degraded_results_reach_the_alert_handler(fixture, passes):
    # Given the filter as the template declares it, and an OnSuccess envelope as SQS delivers it
    [record] = load_event(fixture)["Records"]

    # When Lambda evaluates the filter on the record
    # Then it passes exactly the error and the slow (6000 ms) degraded result
    assert alert_queue_filter().matches(record) is passes


def test_a_filter_on_the_bare_result_would_match_nothing():
    # Given a pattern written against the function's return value instead of the envelope
    bare = RecordFilter({"Filters": [{"Pattern": json.dumps({"body": {"status": ["error"]}})}]})
    [record] = load_event("alert_handler/success-error.json")["Records"]

    # Then even the error result does not match: the status is under responsePayload
    assert not bare.matches(record)


def test_degraded_exactly_at_the_threshold_does_not_alert():
    [record] = load_event("alert_handler/success-degraded-slow.json")["Records"]
    body = json.loads(record["body"])
    body["responsePayload"]["latencyMs"] = 5000
    assert not alert_queue_filter().matches({**record, "body": json.dumps(body)})
