"""The product template's stream consumers on the local stack: real shards, filters, bisect, OnFailure,
the MonitorTable stream and DynamoDB TTL deletes."""

from __future__ import annotations

import json

import boto3
import pytest

from mcp_backend.calllog.models import CallLogEventType, CallLogRecord
from tests.kinesis import stream_json

pytestmark = pytest.mark.e2e


def monitor_table(stack) -> str:
    return stack.environment.table_name("MonitorTable")


def put_call_log(stack, records: list[bytes], partition_key: str = "user#user-alice") -> list[str]:
    """In order on one shard (one partition key); returns the sequence numbers."""
    kinesis = boto3.client("kinesis")
    name = stack.environment.stack.ensure("CallLogStream").ref
    return [
        kinesis.put_record(StreamName=name, Data=data, PartitionKey=partition_key)["SequenceNumber"] for data in records
    ]


def tool_error() -> bytes:
    return CallLogRecord(
        event_type=CallLogEventType.TOOL_ERROR, user_id="user-alice", tool_name="analyze_dataset"
    ).data()


def completed_idempotency_records(stack) -> int:
    items = boto3.client("dynamodb").scan(TableName=stack.environment.table_name("IdempotencyTable"))["Items"]
    return sum(1 for item in items if item["status"]["S"] == "COMPLETED")


def failure_messages(stack, queue: str) -> list[dict]:
    found = boto3.client("sqs").receive_message(QueueUrl=stack.environment.queue_url(queue), MaxNumberOfMessages=10)
    return [json.loads(m["Body"]) for m in found.get("Messages", [])]


def test_poison_call_log_record_is_isolated_by_bisection_and_lands_in_the_on_failure_queue(start_stack):
    # Given a shard holding two tool errors, a record that passes the filter but is no call-log record, and two more
    stack = start_stack()
    poison = json.dumps({"eventType": "job_failed", "jobId": "job-without-user"}).encode()
    sequence_numbers = put_call_log(stack, [tool_error(), tool_error(), poison, tool_error(), tool_error()])
    mapping = stack.environment.stack.event_source_mappings()["CallLogAnalyzerCallLogStreamMapping"]

    # When the analyzer's event source runs until the stack is idle
    stack.settle()

    # Then every good record was processed exactly once (one idempotency record each) ...
    assert completed_idempotency_records(stack) == 4
    # ... and the poison record alone reached the OnFailure queue, in the shape Lambda sends
    [failure] = failure_messages(stack, "CallLogFailureQueue")
    info = failure["KinesisBatchInfo"]
    assert (info["startSequenceNumber"], info["endSequenceNumber"], info["batchSize"]) == (
        sequence_numbers[2],
        sequence_numbers[2],
        1,
    )
    assert info["streamArn"] == stack.environment.stack.ensure("CallLogStream").attributes["Arn"]
    assert info["shardId"].startswith("shardId-")
    assert failure["requestContext"]["condition"] == "RetryAttemptsExhausted"
    assert failure["requestContext"]["approximateInvokeCount"] == int(mapping["MaximumRetryAttempts"]) + 1
    assert failure["requestContext"]["functionArn"] == stack.environment.stack.function("CallLogAnalyzer").arn
    # The last attempt was a partial batch response (not an error), so AWS records no functionError
    assert failure["responseContext"] == {"statusCode": 200, "executedVersion": "$LATEST"}
    assert failure["version"] == "1.0" and failure["timestamp"].endswith("Z")


def test_probe_result_with_a_changed_schema_hash_produces_exactly_one_schema_drift_record(start_stack):
    # Given a registered endpoint whose last known schema hash is sha256:a1 (the pinned stamps are safe: the items
    # have no TTL attribute, and the drift detector compares them with each other, never with the clock)
    stack = start_stack()
    dynamodb = boto3.client("dynamodb")
    table = monitor_table(stack)
    dynamodb.put_item(
        TableName=table,
        Item={
            "serverId": {"S": "srv-weather"},
            "sortKey": {"S": "endpoint"},
            "itemType": {"S": "endpoint"},
            "lastSchemaHash": {"S": "sha256:a1"},
            "schemaHashSince": {"S": "2026-11-28T08:00:00.000Z"},
        },
    )

    # When two probe results with a new hash are written, and the stream consumers run
    for second, probed_at in enumerate(("2026-11-29T12:05:00.000Z", "2026-11-29T12:06:00.000Z")):
        dynamodb.put_item(
            TableName=table,
            Item={
                "serverId": {"S": "srv-weather"},
                "sortKey": {"S": f"probe#{probed_at}#p-{second}"},
                "itemType": {"S": "probe_result"},
                "status": {"S": "healthy"},
                "probedAt": {"S": probed_at},
                "latencyMs": {"N": "120"},
                "schemaHash": {"S": "sha256:b2"},
            },
        )
    stack.settle()

    # Then the call log holds exactly one schema_drift record for the change, and the endpoint knows the new hash
    drift = [
        r for r in stream_json(stack.environment.stack.ensure("CallLogStream").ref) if r["eventType"] == "schema_drift"
    ]
    assert len(drift) == 1
    assert drift[0]["serverId"] == "srv-weather"
    endpoint = dynamodb.get_item(TableName=table, Key={"serverId": {"S": "srv-weather"}, "sortKey": {"S": "endpoint"}})
    assert endpoint["Item"]["lastSchemaHash"]["S"] == "sha256:b2"


def test_ttl_expiry_updates_the_rollup_while_a_manual_delete_does_not(start_stack, clock):
    # Given two probe results of one day: one whose TTL has passed, one a person deletes
    stack = start_stack()
    dynamodb = boto3.client("dynamodb")
    table = monitor_table(stack)
    expired = str(int(clock.now.timestamp()) - 60)
    for sort_key, status in (
        ("probe#2026-11-28T10:00:00.000Z#p-1", "error"),
        ("probe#2026-11-28T11:00:00.000Z#p-2", "healthy"),
    ):
        dynamodb.put_item(
            TableName=table,
            Item={
                "serverId": {"S": "srv-weather"},
                "sortKey": {"S": sort_key},
                "itemType": {"S": "probe_result"},
                "status": {"S": status},
                "probedAt": {"S": sort_key.split("#")[1]},
                "latencyMs": {"N": "200"},
                "expiresAt": {"N": expired if status == "error" else str(int(clock.now.timestamp()) + 86400)},
            },
        )
    dynamodb.delete_item(
        TableName=table, Key={"serverId": {"S": "srv-weather"}, "sortKey": {"S": "probe#2026-11-28T11:00:00.000Z#p-2"}}
    )

    # When DynamoDB's TTL process deletes the expired one and the stream consumers run
    assert stack.sweep_ttl() == 1
    stack.settle()

    # Then the day's rollup counts the expired result only
    rollup = dynamodb.get_item(
        TableName=table, Key={"serverId": {"S": "srv-weather"}, "sortKey": {"S": "rollup#2026-11-28"}}
    )["Item"]
    assert (rollup["probeCount"]["N"], rollup["errorCount"]["N"]) == ("1", "1")
    assert "healthyCount" not in rollup or rollup["healthyCount"]["N"] == "0"
