"""CallLogAnalyzer through its real handler, on moto resources created from template.yaml."""

from __future__ import annotations

import base64
import json

import boto3
import pytest

from mcp_backend.batch import StreamBatchStuck, UnexpectedEventSource
from mcp_backend.calllog.models import CallLogEventType, CallLogRecord
from tests.conftest import load_event
from tests.kinesis import delivered, lambda_event, stream_records

ANALYZER = "CallLogAnalyzer"


@pytest.fixture
def alerts(local):
    """An SQS queue subscribed to the template's AlertTopic: returns the alerts published so far."""
    sqs = boto3.client("sqs")
    url = sqs.create_queue(QueueName="alert-inbox")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    boto3.client("sns").subscribe(
        TopicArn=local.stack.ensure("AlertTopic").ref,
        Protocol="sqs",
        Endpoint=arn,
        Attributes={"RawMessageDelivery": "true"},
    )

    def received() -> list[dict]:
        messages = []
        while batch := sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", []):
            messages += [json.loads(m["Body"]) for m in batch]
            sqs.delete_message_batch(
                QueueUrl=url, Entries=[{"Id": m["MessageId"], "ReceiptHandle": m["ReceiptHandle"]} for m in batch]
            )
        return messages

    return received


def tool_error_counts(output: str) -> dict[str, float]:
    counts: dict[str, float] = {}
    for line in output.splitlines():
        if line.startswith('{"_aws"') and "CallLogToolErrors" in line:
            blob = json.loads(line)
            value = blob["CallLogToolErrors"]
            total = sum(value) if isinstance(value, list) else value
            counts[blob["ToolName"]] = counts.get(blob["ToolName"], 0) + total
    return counts


def threshold(local) -> int:
    return int(local.stack.function(ANALYZER).environment["ERROR_ALERT_THRESHOLD"])


def test_mixed_fixture_reports_only_the_poison_record_and_alerts_on_schema_drift(local, alerts):
    # Given the mixed fixture as the mapping's filter delivers it (healthy calls and non-JSON data dropped)
    event = delivered(load_event("call_log_analyzer/mixed-batch.json"), ANALYZER)
    subjects = (b"userId", b"serverId", b"functionName")
    (poison_record,) = [r for r in event["Records"] if not any(subject in _data(r) for subject in subjects)]

    # When the analyzer handles it
    response = local.invoke(ANALYZER, event)

    # Then only the actionable record that is not a call-log record fails, by its sequence number
    assert response == {"batchItemFailures": [{"itemIdentifier": poison_record["kinesis"]["sequenceNumber"]}]}
    # And the schema drift raised one alert, while two tool errors stay below the threshold
    published = alerts()
    assert [(a["alert"], a.get("server")) for a in published] == [("schema_drift", "srv-weather")]
    assert published[0]["schemaHash"] == "sha256:b2" and published[0]["previousSchemaHash"] == "sha256:a1"


def _data(record: dict) -> bytes:
    return base64.b64decode(record["kinesis"]["data"])


def test_an_error_burst_alerts_once_for_the_tool_that_crossed_the_threshold(local, alerts, capsys):
    # Given the burst fixture: 6 analyze_dataset errors and 1 list_datasets error
    event = delivered(load_event("call_log_analyzer/error-burst.json"), ANALYZER)
    assert threshold(local) <= 6
    capsys.readouterr()

    # When the analyzer handles it
    response = local.invoke(ANALYZER, event)

    # Then every record succeeds, one alert names analyze_dataset, and each tool's errors are counted
    assert response == {"batchItemFailures": []}
    (alert,) = alerts()
    assert alert["alert"] == "error_threshold_crossed" and alert["tool"] == "analyze_dataset"
    assert alert["errorsInBatch"] == 6 and alert["byEventType"] == {"job_failed": 2, "tool_error": 4}
    assert "userId" not in json.dumps(alert) and "user-0" not in json.dumps(alert)
    assert tool_error_counts(capsys.readouterr().out) == {"analyze_dataset": 4, "list_datasets": 1}


def put_call_log(local, records: list[CallLogRecord | bytes], partition_key: str = "user#user-alice") -> list[dict]:
    """Put records on the template's stream in order (one partition key: one shard) and read them back."""
    kinesis = boto3.client("kinesis")
    name = local.stack.ensure("CallLogStream").ref
    for record in records:
        data = record if isinstance(record, bytes) else record.data()
        kinesis.put_record(StreamName=name, Data=data, PartitionKey=partition_key)
    return sorted(stream_records(name), key=lambda r: int(r["SequenceNumber"]))


def error(tool: str = "analyze_dataset") -> CallLogRecord:
    return CallLogRecord(event_type=CallLogEventType.TOOL_ERROR, user_id="user-alice", tool_name=tool)


def test_partial_failure_reports_the_first_failed_sequence_number_and_retries_repeat_no_side_effect(
    local, alerts, capsys
):
    # Given, on one shard, 2 tool errors, a poison record, then threshold-2 more errors of the same tool
    count_after = threshold(local) - 2
    poison = json.dumps({"eventType": "job_failed", "jobId": "job-without-user"}).encode()
    records = put_call_log(local, [error(), error(), poison, *[error() for _ in range(count_after)]])
    stream_arn = local.stack.ensure("CallLogStream").attributes["Arn"]
    event = delivered(lambda_event(records, stream_arn), ANALYZER)
    failed_sequence = records[2]["SequenceNumber"]
    capsys.readouterr()

    # When the analyzer handles the batch
    first = local.invoke(ANALYZER, event)

    # Then the poison record's sequence number is the one reported, every good record counted once,
    # and the threshold (reached by the records before and after the poison) raised one alert
    assert first == {"batchItemFailures": [{"itemIdentifier": failed_sequence}]}
    assert tool_error_counts(capsys.readouterr().out) == {"analyze_dataset": 2 + count_after}
    assert len(alerts()) == 1

    # When Lambda retries the shard from the failed sequence number
    retry = {"Records": [r for r in event["Records"] if int(r["kinesis"]["sequenceNumber"]) >= int(failed_sequence)]}
    with pytest.raises(StreamBatchStuck):
        local.invoke(ANALYZER, retry)

    # Then, the poison now first, the invocation fails so Lambda bisects the batch; the records after it
    # were delivered again but counted no second time
    assert tool_error_counts(capsys.readouterr().out) == {}
    assert alerts() == []

    # When the whole batch comes again (a timed-out invocation is retried from its start)
    third = local.invoke(ANALYZER, event)

    # Then the records before the failure repeat nothing either: no count, no second alert
    assert third == {"batchItemFailures": [{"itemIdentifier": failed_sequence}]}
    assert tool_error_counts(capsys.readouterr().out) == {}
    assert alerts() == []


def test_same_sequence_number_on_another_shard_is_a_different_record(local, alerts, capsys):
    # Given one error on each of two shards that happen to carry the same sequence number (moto numbers per shard)
    records = put_call_log(local, [error()], "user#a") + put_call_log(local, [error()], "user#b")
    stream_arn = local.stack.ensure("CallLogStream").attributes["Arn"]
    first, second = sorted({r["ShardId"]: r for r in records}.values(), key=lambda r: r["ShardId"])
    if first["SequenceNumber"] != second["SequenceNumber"]:
        pytest.skip("the two shards numbered their records differently")
    capsys.readouterr()

    # When each shard's batch is delivered
    for record in (first, second):
        local.invoke(ANALYZER, lambda_event([record], stream_arn))

    # Then both are counted
    assert tool_error_counts(capsys.readouterr().out) == {"analyze_dataset": 2}


def test_an_unpublishable_alert_does_not_fail_the_counted_records(local, monkeypatch, caplog):
    # Given an error burst and an alert topic that refuses to publish
    from moto.sns.models import SNSBackend

    def refuse(self, *args, **kwargs):
        raise RuntimeError("sns down")

    monkeypatch.setattr(SNSBackend, "publish", refuse)
    event = delivered(load_event("call_log_analyzer/error-burst.json"), ANALYZER)

    # When the analyzer handles it
    response = local.invoke(ANALYZER, event)

    # Then the records succeed and the failed alert is logged
    assert response == {"batchItemFailures": []}
    assert any(r.getMessage() == "alert not published" for r in caplog.records)


@pytest.mark.parametrize(
    "event",
    [load_event("tool_worker/healthy-batch.json"), {"Records": []}, {"detail-type": "Scheduled Event"}],
    ids=["sqs", "empty", "eventbridge"],
)
def test_non_kinesis_event_fails_fast(local, event):
    with pytest.raises(UnexpectedEventSource, match="aws:kinesis"):
        local.invoke(ANALYZER, event)


def platform_report(function: str, status: str = "success", *, cold: bool = False, memory: int = 100) -> CallLogRecord:
    return CallLogRecord(
        event_type=CallLogEventType.PLATFORM_REPORT,
        function_name=function,
        request_id=f"req-{status}-{memory}",
        status=status,
        cold_start=cold,
        init_duration_ms=400.0 if cold else None,
        duration_ms=50.0 if status == "success" else 30000.0,
        billed_duration_ms=50,
        max_memory_used_mb=memory,
        memory_size_mb=512,
    )


def function_metrics(output: str, function: str) -> dict[str, float]:
    for line in output.splitlines():
        if line.startswith('{"_aws"') and f'"FunctionName":"{function}"' in line.replace(" ", ""):
            blob = json.loads(line)
            return {
                k: (v[0] if isinstance(v, list) else v) for k, v in blob.items() if isinstance(v, int | float | list)
            }
    return {}


def test_platform_reports_give_per_function_figures_and_a_timeout_burst_alerts_once(local, alerts, capsys):
    # Given a batch of ToolWorker reports: a cold start, a success, then as many timeouts as the threshold
    timeouts = int(local.stack.function(ANALYZER).environment["TIMEOUT_ALERT_THRESHOLD"])
    reports = [platform_report("tool-worker", cold=True), platform_report("tool-worker")]
    reports += [platform_report("tool-worker", "timeout", memory=100 + n) for n in range(timeouts)]
    records = put_call_log(local, reports, partition_key="function#tool-worker")
    event = delivered(lambda_event(records, local.stack.ensure("CallLogStream").attributes["Arn"]), ANALYZER)
    assert len(event["Records"]) == len(reports)  # the stream filter lets every platform report through
    capsys.readouterr()

    # When the analyzer handles it
    response = local.invoke(ANALYZER, event)

    # Then the function's figures are emitted and one timeout-burst alert names it
    assert response == {"batchItemFailures": []}
    figures = function_metrics(capsys.readouterr().out, "tool-worker")
    assert figures["ReportedInvocations"] == len(reports) and figures["ColdStarts"] == 1
    assert figures["Timeouts"] == timeouts and figures["DurationP50"] == 30000.0
    (alert,) = alerts()
    assert (alert["alert"], alert["function"], alert["timeoutsInBatch"]) == ("timeout_burst", "tool-worker", timeouts)


def test_an_invocation_near_its_memory_limit_alerts(local, alerts):
    # Given one report of an invocation that used 95% of its 512 MB
    records = put_call_log(local, [platform_report("mcp-server", memory=487)], partition_key="function#mcp-server")
    event = delivered(lambda_event(records, local.stack.ensure("CallLogStream").attributes["Arn"]), ANALYZER)

    # When the analyzer handles it
    local.invoke(ANALYZER, event)

    # Then one memory alert names the function and the share used
    (alert,) = alerts()
    assert (alert["alert"], alert["function"], alert["maxMemoryUsedPercent"]) == (
        "memory_near_limit",
        "mcp-server",
        95.1,
    )


def test_probes_stopped_reaches_the_analyzer_and_alerts_once_naming_the_endpoint(local, alerts):
    # Given the record the dispatcher writes when it stops probing an endpoint, as the stream's filter delivers it
    record = CallLogRecord(event_type=CallLogEventType.PROBES_STOPPED, user_id="user-alice", server_id="ep-dead")
    records = put_call_log(local, [record], partition_key="server#ep-dead")
    event = delivered(lambda_event(records, local.stack.ensure("CallLogStream").attributes["Arn"]), ANALYZER)
    assert len(event["Records"]) == 1

    # When the analyzer handles it
    response = local.invoke(ANALYZER, event)

    # Then one alert names the endpoint (not its owner)
    assert response == {"batchItemFailures": []}
    (alert,) = alerts()
    assert (alert["alert"], alert["server"]) == ("probes_stopped", "ep-dead")
    assert "user-alice" not in json.dumps(alert)
