"""Nothing ships unwatched: derived from the expanded template, so a new function, dead-letter queue or
stream mapping without its alarm fails here."""

from __future__ import annotations

from typing import Any

import pytest

from tests.template.test_invariants import RESOURCES, STREAM_MAPPINGS, of_type, referenced_resource, resolve

ALARMS = of_type("AWS::CloudWatch::Alarm")
FUNCTIONS = of_type("AWS::Lambda::Function")


def watched(alarm: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(metric name, dimension name, logical id) of every metric an alarm reads, metric math included."""
    properties = alarm["Properties"]
    queries = properties.get("Metrics", [])
    metrics = [properties] + [query["MetricStat"]["Metric"] for query in queries if "MetricStat" in query]
    return [
        (metric["MetricName"], dimension["Name"], referenced_resource(dimension["Value"]))
        for metric in metrics
        if "MetricName" in metric
        for dimension in metric.get("Dimensions", [])
    ]


def alarms_on(metric_name: str, logical_id: str) -> list[str]:
    return [
        name
        for name, alarm in ALARMS.items()
        if any(metric == metric_name and target == logical_id for metric, _, target in watched(alarm))
    ]


def end_of_the_line_queues() -> set[str]:
    """Every queue something gives up into: redrive DLQs (queues and subscriptions) and stream OnFailure queues."""
    found = set()
    for resource in [*of_type("AWS::SQS::Queue").values(), *of_type("AWS::SNS::Subscription").values()]:
        redrive = resource["Properties"].get("RedrivePolicy")
        if redrive:
            found.add(referenced_resource(redrive["deadLetterTargetArn"]))
    for mapping in STREAM_MAPPINGS.values():
        found.add(referenced_resource(mapping["Properties"]["DestinationConfig"]["OnFailure"]["Destination"]))
    return found


def test_there_is_something_to_watch():
    assert len(FUNCTIONS) >= 9 and len(end_of_the_line_queues()) >= 4 and len(STREAM_MAPPINGS) >= 3


@pytest.mark.parametrize("function_id", sorted(FUNCTIONS))
def test_every_function_has_an_errors_alarm(function_id):
    assert alarms_on("Errors", function_id), function_id


@pytest.mark.parametrize("queue_id", sorted(end_of_the_line_queues()))
def test_every_dead_letter_and_failure_queue_has_a_depth_alarm(queue_id):
    assert alarms_on("ApproximateNumberOfMessagesVisible", queue_id), queue_id


@pytest.mark.parametrize("mapping_id", sorted(STREAM_MAPPINGS))
def test_every_stream_mapping_has_an_iterator_age_alarm(mapping_id):
    function_id = referenced_resource(STREAM_MAPPINGS[mapping_id]["Properties"]["FunctionName"])
    assert alarms_on("IteratorAge", function_id), mapping_id


def test_the_mcp_endpoint_alarms_on_throttles_and_on_p99_duration_near_its_timeout():
    assert alarms_on("Throttles", "McpServer")
    [duration] = alarms_on("Duration", "McpServer")
    properties = ALARMS[duration]["Properties"]
    [p99] = [q for q in properties["Metrics"] if "MetricStat" in q]
    [share] = [q for q in properties["Metrics"] if q.get("ReturnData")]
    # Given McpServerTimeout 300, the alarm reads p99 as a share of 300 000 ms and fires above 0.8 of it
    assert p99["MetricStat"]["Stat"] == "p99"
    assert resolve(share["Expression"], McpServerTimeout=300) == "p99 / (300 * 1000)"
    assert 0.5 <= properties["Threshold"] < 1


def test_every_alarm_notifies_the_ops_topic_when_there_is_one():
    for name, alarm in ALARMS.items():
        assert alarm["Properties"]["AlarmActions"] == {
            "Fn::If": ["HasAlarmEmail", [{"Ref": "OpsAlarmTopic"}], {"Ref": "AWS::NoValue"}]
        }, name


def test_the_alarm_check_fails_for_an_unwatched_function():
    # The rule above, shown able to fail: a function no alarm names.
    assert "McpServerRole" in RESOURCES and alarms_on("Errors", "McpServerRole") == []
