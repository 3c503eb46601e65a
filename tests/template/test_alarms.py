"""Nothing ships unwatched: derived from the expanded template, so a new function, dead-letter queue or
stream mapping without its alarm fails here."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.template.test_invariants import (
    RESOURCES,
    STREAM_MAPPINGS,
    invoked_function,
    of_type,
    referenced_resource,
    resolve,
    scope,
)
from tests.template.test_mcp_concurrency import public_functions

ALARMS = of_type("AWS::CloudWatch::Alarm")
DEPLOYMENT_ALARMS = {
    referenced_resource(alarm["Name"])
    for group in of_type("AWS::CodeDeploy::DeploymentGroup").values()
    for alarm in group["Properties"]["AlarmConfiguration"]["Alarms"]
}
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
        # A resource's own name, not "<function>:<alias>" (a Fn::Sub: the deployment alarms' Resource)
        if "Ref" in dimension["Value"] or "Fn::GetAtt" in dimension["Value"]
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
    function_id = invoked_function(STREAM_MAPPINGS[mapping_id]["Properties"]["FunctionName"])
    assert alarms_on("IteratorAge", function_id), mapping_id


def test_the_mcp_endpoint_alarms_on_throttles_and_on_p99_duration_near_its_timeout():
    assert alarms_on("Throttles", "McpServer")
    # The operations alarm: the deployment alarms read alias live over one-minute periods (test_gradual_deploys)
    [duration] = [name for name in alarms_on("Duration", "McpServer") if name not in DEPLOYMENT_ALARMS]
    properties = ALARMS[duration]["Properties"]
    [p99] = [q for q in properties["Metrics"] if "MetricStat" in q]
    [share] = [q for q in properties["Metrics"] if q.get("ReturnData")]
    # Given McpServerTimeout 300, the alarm reads p99 as a share of 300 000 ms and fires above 0.8 of it
    assert p99["MetricStat"]["Stat"] == "p99"
    assert resolve(share["Expression"], McpServerTimeout=300) == "p99 / (300 * 1000)"
    assert 0.5 <= properties["Threshold"] < 1


@pytest.mark.parametrize("function_id", sorted(public_functions()))
def test_every_public_function_alarms_when_its_reserved_concurrency_throttles(function_id):
    # Given a function anyone may invoke, capped by its reserved concurrency
    # Then an alarm says when the cap answered 429 (a flood, or traffic that outgrew it)
    assert alarms_on("Throttles", function_id), function_id


def test_every_alarm_notifies_the_ops_topic_when_there_is_one():
    for name, alarm in ALARMS.items():
        assert alarm["Properties"]["AlarmActions"] == {
            "Fn::If": ["HasAlarmEmail", [{"Ref": "OpsAlarmTopic"}], {"Ref": "AWS::NoValue"}]
        }, name


def test_the_alarm_check_fails_for_an_unwatched_function():
    # The rule above, shown able to fail: a function no alarm names.
    assert "McpServerRole" in RESOURCES and alarms_on("Errors", "McpServerRole") == []


def dashboard_metrics() -> list[list[Any]]:
    [dashboard] = of_type("AWS::CloudWatch::Dashboard").values()
    body = json.loads(resolve(dashboard["Properties"]["DashboardBody"]))
    return [row for widget in body["widgets"] for row in widget["properties"]["metrics"]]


def on_dashboard(namespace: str, metric_name: str, dimension_value: str) -> bool:
    return any(row[:2] == [namespace, metric_name] and dimension_value in row for row in dashboard_metrics())


def test_the_dashboard_shows_every_function_queue_and_stream_consumer_it_should():
    # Given the dashboard body as CloudFormation would render it (Ref -> "ref:<id>", GetAtt -> "arn:<id>.<attr>")
    # Then every function's errors, every end-of-the-line queue, every stream consumer's lag and the endpoint's
    # traffic, throttles and p50/p99 latency are on it, and the per-tool and uptime panels are metric math
    defaults = scope()
    for function_id, function in FUNCTIONS.items():
        if "Condition" in function and not defaults.condition(function["Condition"]):
            continue  # off by default (the authorization server): its alarms watch it
        assert on_dashboard("AWS/Lambda", "Errors", f"ref:{function_id}"), function_id
    for queue_id in end_of_the_line_queues() | {"JobQueue"}:
        assert on_dashboard("AWS/SQS", "ApproximateNumberOfMessagesVisible", f"arn:{queue_id}.QueueName"), queue_id
    for mapping in STREAM_MAPPINGS.values():
        function_id = invoked_function(mapping["Properties"]["FunctionName"])
        assert on_dashboard("AWS/Lambda", "IteratorAge", f"ref:{function_id}"), function_id
    for metric in ("Invocations", "Throttles", "Duration"):
        assert on_dashboard("AWS/Lambda", metric, "ref:McpServer"), metric
    stats = {row[-1].get("stat") for row in dashboard_metrics() if row[:2] == ["AWS/Lambda", "Duration"]}
    assert {"p50", "p99"} <= stats
    expressions = [row[0]["expression"] for row in dashboard_metrics() if isinstance(row[0], dict)]
    assert any("ToolInvocation" in e and 'Environment="dev"' in e for e in expressions)
    assert any("errors / invocations" in e for e in expressions)
