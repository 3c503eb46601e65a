"""Each event-source rule the local stack emulates, observed the way AWS would show it: queue depth,
DLQ contents, OnFailure records, destination envelopes, and what the functions saw."""

from __future__ import annotations

import base64
import datetime as dt
import json

import pytest

pytestmark = pytest.mark.e2e


def seen(stack, item_id: str) -> int:
    """How many times the test functions recorded item_id (0 when never delivered)."""
    item = (
        stack.client("dynamodb")
        .get_item(TableName=stack.environment.table_name("SeenTable"), Key={"id": {"S": item_id}})
        .get("Item")
    )
    return int(item["deliveries"]["N"]) if item else 0


def messages(stack, queue: str) -> list[dict]:
    found = stack.client("sqs").receive_message(
        QueueUrl=stack.environment.queue_url(queue), MaxNumberOfMessages=10, VisibilityTimeout=0
    )
    return [json.loads(m["Body"]) for m in found.get("Messages", [])]


def send(stack, queue: str, body: dict) -> str:
    return stack.client("sqs").send_message(QueueUrl=stack.environment.queue_url(queue), MessageBody=json.dumps(body))[
        "MessageId"
    ]


# ---------------------------------------------------------------------------------------- SQS
def test_sqs_message_is_processed_once_and_deleted(semantics):
    # Given a message the filter accepts
    send(semantics, "WorkQueue", {"id": "ok-1", "kind": "work"})

    # When the event source runs until the stack is idle
    semantics.settle()

    # Then the function saw it once and the queue is empty
    assert seen(semantics, "sqs:ok-1") == 1
    assert semantics.environment.queue_depth("WorkQueue") == 0


def test_sqs_message_outside_the_filter_never_reaches_the_function_and_is_deleted(semantics):
    # Given a message that matches no filter pattern
    send(semantics, "WorkQueue", {"id": "noise-1", "kind": "chatter"})

    # When the event source polls
    semantics.settle()

    # Then the function never saw it and it is gone, not in the DLQ
    assert seen(semantics, "sqs:noise-1") == 0
    assert semantics.environment.queue_depth("WorkQueue") == 0
    assert semantics.environment.queue_depth("WorkDeadLetterQueue") == 0


def test_sqs_reported_failure_is_redelivered_after_visibility_timeout_then_redriven(semantics, clock):
    # Given a batch with one good and one failing message
    import time_machine

    send(semantics, "WorkQueue", {"id": "good-1", "kind": "work"})
    poison = send(semantics, "WorkQueue", {"id": "bad-1", "kind": "work", "fail": True})

    # When the source polls, and each time the queue's 1 s visibility timeout passes
    with time_machine.travel(clock.now, tick=True) as traveller:
        for _ in range(4):
            semantics.settle()
            traveller.shift(2)
        dead = semantics.client("sqs").receive_message(
            QueueUrl=semantics.environment.queue_url("WorkDeadLetterQueue"), MaxNumberOfMessages=10
        )["Messages"]

    # Then the good message ran once; the failing one ran maxReceiveCount (3) times and sits in the DLQ
    assert seen(semantics, "sqs:good-1") == 1
    assert seen(semantics, "sqs:bad-1") == 3
    assert [m["MessageId"] for m in dead] == [poison]
    assert semantics.environment.queue_depth("WorkQueue") == 0


# ---------------------------------------------------------------------------------------- Kinesis
def put_records(stack, records: list[dict], partition_key: str = "caller-1") -> list[str]:
    return [entry["SequenceNumber"] for entry in put_records_entries(stack, records, partition_key)]


def put_records_entries(stack, records: list[dict], partition_key: str) -> list[dict]:
    stream = stack.environment.stack.ensure("EventStream").ref
    response = stack.client("kinesis").put_records(
        StreamName=stream, Records=[{"Data": json.dumps(r).encode(), "PartitionKey": partition_key} for r in records]
    )
    return response["Records"]


def test_kinesis_failing_record_resumes_from_it_is_isolated_by_bisect_and_sent_on_failure(semantics):
    # Given one shard's records where the third is poison
    batch = [{"id": f"k{i}", "kind": "work", "poison": i == 3} for i in range(1, 7)]
    sequence_numbers = put_records(semantics, batch)

    # When the stream source processes the shard
    semantics.settle()

    # Then records before the poison were delivered exactly once (processing resumed from it) ...
    assert [seen(semantics, f"kinesis:k{i}") for i in (1, 2)] == [1, 1]
    # ... records after it were processed once bisection isolated it ...
    assert [seen(semantics, f"kinesis:k{i}") for i in (4, 5, 6)] == [1, 1, 1]
    # ... and the poison record alone went to the OnFailure queue after MaximumRetryAttempts retries
    [failure] = messages(semantics, "StreamFailureQueue")
    info = failure["KinesisBatchInfo"]
    assert (info["startSequenceNumber"], info["endSequenceNumber"], info["batchSize"]) == (
        sequence_numbers[2],
        sequence_numbers[2],
        1,
    )
    assert failure["requestContext"]["condition"] == "RetryAttemptsExhausted"
    assert failure["requestContext"]["approximateInvokeCount"] == 3
    assert failure["responseContext"]["functionError"] == "Unhandled"
    assert info["streamArn"] == semantics.environment.stack.ensure("EventStream").attributes["Arn"]


def test_kinesis_filter_skips_records_and_every_shard_is_read(semantics):
    # Given records on both shards (different partition keys), some outside the filter
    used_shards = set()
    for caller in range(8):
        entries = put_records_entries(
            semantics, [{"id": f"s{caller}", "kind": "work"}, {"id": f"n{caller}", "kind": "noise"}], f"c{caller}"
        )
        used_shards |= {entry["ShardId"] for entry in entries}

    # When the stream source runs
    outcome = semantics.stream_sources["StreamConsumerStream"].poll_once()

    # Then every matching record was delivered once, from all shards, and no filtered one
    assert len(used_shards) == 2
    assert [seen(semantics, f"kinesis:s{c}") for c in range(8)] == [1] * 8
    assert [seen(semantics, f"kinesis:n{c}") for c in range(8)] == [0] * 8
    assert outcome.filtered_out == 8


def test_kinesis_records_older_than_maximum_record_age_go_to_on_failure_uninvoked(semantics, clock):
    # Given a record that sits in the stream past MaximumRecordAgeInSeconds (3600 s)
    [sequence_number] = put_records(semantics, [{"id": "old-1", "kind": "work"}])
    clock.now = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=3601)  # arrival was stamped in real time

    # When the stream source reads it
    semantics.settle()

    # Then it was never delivered and its OnFailure record says why, without a response context
    assert seen(semantics, "kinesis:old-1") == 0
    [failure] = messages(semantics, "StreamFailureQueue")
    assert failure["requestContext"]["condition"] == "RecordAgeExceeded"
    assert failure["KinesisBatchInfo"]["startSequenceNumber"] == sequence_number
    assert "responseContext" not in failure


# ---------------------------------------------------------------------------------------- DynamoDB
def test_dynamodb_ttl_delete_reaches_the_ttl_filter_and_a_manual_delete_does_not(semantics, clock):
    # Given two items: one whose TTL has passed, one deleted by hand
    dynamodb = semantics.client("dynamodb")
    table = semantics.environment.table_name("ItemsTable")
    expired_at = str(int(clock.now.timestamp()) - 10)
    dynamodb.put_item(TableName=table, Item={"id": {"S": "ttl-1"}, "expiresAt": {"N": expired_at}})
    dynamodb.put_item(TableName=table, Item={"id": {"S": "manual-1"}})
    dynamodb.delete_item(TableName=table, Key={"id": {"S": "manual-1"}})

    # When the TTL sweeper runs and the stream source polls
    assert semantics.sweep_ttl() == 1
    semantics.settle()

    # Then only the TTL delete (userIdentity Service / dynamodb.amazonaws.com) reached the function
    assert seen(semantics, "expired:ttl-1") == 1
    assert seen(semantics, "expired:manual-1") == 0
    assert "Item" not in dynamodb.get_item(TableName=table, Key={"id": {"S": "ttl-1"}})


# ---------------------------------------------------------------------------------------- async
def invoke_async(stack, function: str, payload: dict) -> int:
    return stack.client("lambda").invoke(FunctionName=function, InvocationType="Event", Payload=json.dumps(payload))[
        "StatusCode"
    ]


def test_async_success_lands_one_on_success_envelope(semantics):
    # Given an asynchronous invocation through the Lambda API
    status = invoke_async(semantics, semantics.environment.stack.function("AsyncWorker").name, {"id": "a-ok"})

    # When the async queue runs
    semantics.settle()

    # Then Lambda accepted it with 202 and OnSuccess received the invocation record
    assert status == 202
    [envelope] = messages(semantics, "OutcomeQueue")
    assert envelope["version"] == "1.0"
    assert envelope["requestContext"]["condition"] == "Success"
    assert envelope["requestContext"]["approximateInvokeCount"] == 1
    assert envelope["requestContext"]["functionArn"].endswith("AsyncWorker:$LATEST")
    assert envelope["requestPayload"] == {"id": "a-ok"}
    assert envelope["responseContext"] == {"statusCode": 200, "executedVersion": "$LATEST"}
    assert envelope["responsePayload"] == {"handled": "a-ok"}
    assert messages(semantics, "FailureQueue") == []


def test_async_invocation_that_raises_lands_one_on_failure_envelope_after_retries(semantics):
    # Given a function that raises, invoked asynchronously by another function (InvocationType Event)
    dispatcher = semantics.environment.stack.function("Dispatcher").name
    response = semantics.environment.invoke("Dispatcher", {"forward": {"id": "a-bad", "fail": True}})

    # When the async queue runs (retries without waiting locally)
    semantics.settle()

    # Then exactly one OnFailure envelope arrived, counting MaximumRetryAttempts (1) + 1 attempts
    assert response == {"status": 202} and dispatcher
    [envelope] = messages(semantics, "FailureQueue")
    assert envelope["requestContext"]["condition"] == "RetriesExhausted"
    assert envelope["requestContext"]["approximateInvokeCount"] == 2
    assert envelope["requestPayload"] == {"id": "a-bad", "fail": True}
    assert envelope["responseContext"]["functionError"] == "Unhandled"
    assert envelope["responsePayload"]["errorType"] == "ValueError"
    assert envelope["responsePayload"]["errorMessage"] == "asked to fail: a-bad"
    assert messages(semantics, "OutcomeQueue") == []


def test_async_event_older_than_maximum_event_age_is_dropped_to_on_failure(semantics, clock):
    # Given an accepted event that waits longer than MaximumEventAgeInSeconds (60 s) to run
    invoke_async(semantics, semantics.environment.stack.function("AsyncWorker").name, {"id": "a-late"})
    clock.advance(61)

    # When the async queue runs
    semantics.settle()

    # Then the function never ran and OnFailure says the event aged out
    assert seen(semantics, "async:a-late") == 0
    [envelope] = messages(semantics, "FailureQueue")
    assert envelope["requestContext"]["condition"] == "EventAgeExceeded"
    assert envelope["requestContext"]["approximateInvokeCount"] == 0
    assert envelope["requestPayload"] == {"id": "a-late"}


# ---------------------------------------------------------------------------------------- schedules
def test_schedule_fires_at_its_rate_and_on_demand(semantics, clock):
    # Given the AsyncWorker's rate(1 minute) schedule
    # When a minute passes, and when someone fires it now through the local control API
    clock.advance(60)
    fired = semantics.fire_due()
    semantics.settle()
    import httpx

    httpx.post(f"{semantics.lambda_url}/devstack/schedules/AsyncWorkerTick/fire", timeout=60).raise_for_status()
    semantics.settle()

    # Then the target ran twice with the schedule's Input, each landing an OnSuccess envelope
    assert fired == ["AsyncWorkerTick"]
    assert seen(semantics, "async:schedule") == 2
    assert [e["requestPayload"] for e in messages(semantics, "OutcomeQueue")] == [{"source": "schedule"}] * 2


# ---------------------------------------------------------------------------------------- SNS / EventBridge
def test_sns_filter_policy_applies_to_queue_and_lambda_subscribers(semantics):
    # Given the notice topic with an SQS and a Lambda subscriber, both filtering on severity = high
    topic = semantics.environment.stack.ensure("NoticeTopic").ref
    sns = semantics.client("sns")
    for severity in ("high", "low"):
        sns.publish(
            TopicArn=topic,
            Message=f"{severity}-notice",
            MessageAttributes={"severity": {"DataType": "String", "StringValue": severity}},
        )

    # When deliveries run
    semantics.settle()

    # Then only the high-severity notice reached either subscriber
    raw = semantics.client("sqs").receive_message(
        QueueUrl=semantics.environment.queue_url("UrgentNoticeQueue"), MaxNumberOfMessages=10
    )["Messages"]
    assert [m["Body"] for m in raw] == ["high-notice"]
    assert seen(semantics, "sns:high-notice") == 1
    assert seen(semantics, "sns:low-notice") == 0


def test_eventbridge_rule_routes_matching_events_to_queue_and_function(semantics):
    # Given rules matching source devstack.test with detail.level = error
    events = semantics.client("events")
    for level in ("error", "info"):
        events.put_events(
            Entries=[
                {"Source": "devstack.test", "DetailType": "audit", "Detail": json.dumps({"level": level, "id": level})}
            ]
        )

    # When deliveries run
    semantics.settle()

    # Then only the error event reached the queue target and the Lambda target
    [queued] = messages(semantics, "AuditQueue")
    assert queued["detail"] == {"level": "error", "id": "error"}
    assert seen(semantics, "events:error") == 1
    assert seen(semantics, "events:info") == 0


# ---------------------------------------------------------------------------------------- bad input
def test_unemulated_constructs_are_named_and_the_rest_runs(semantics):
    # Given a template with a Function URL on a plain function and a mapping property the stack does not emulate
    # Then each is one line naming the resource and what is not emulated
    assert (
        "PublicUrl: Function URL not served: Dispatcher: handler handlers.dispatcher is not a web-adapter start script"
        in semantics.notices
    )
    assert "StreamConsumerStream: property TumblingWindowInSeconds is not emulated (ignored)" in semantics.notices
    # And the function that fails to import is named, while the others still run
    assert "BrokenImport" in semantics.broken_functions["BrokenImport"]
    assert "a_module_that_does_not_exist" in semantics.broken_functions["BrokenImport"]
    send(semantics, "WorkQueue", {"id": "still-running", "kind": "work"})
    semantics.settle()
    assert seen(semantics, "sqs:still-running") == 1


def test_kinesis_data_is_base64_in_the_event(semantics):
    # Given a record on the stream
    put_records(semantics, [{"id": "b64", "kind": "work"}])
    # When the source reads it
    records = []
    source = semantics.stream_sources["StreamConsumerStream"]
    source.invoke = lambda event: records.extend(event["Records"]) or {"batchItemFailures": []}
    source.poll_once()
    # Then the function gets the Lambda Kinesis record shape, data base64-encoded
    [record] = records
    assert json.loads(base64.b64decode(record["kinesis"]["data"])) == {"id": "b64", "kind": "work"}
    assert record["eventSource"] == "aws:kinesis" and record["eventName"] == "aws:kinesis:record"
    assert record["eventID"].startswith("shardId-")


# ---------------------------------------------------------------------------------------- Lambda Invoke API
def test_lambda_api_request_response_returns_the_result_or_the_function_error(semantics):
    # Given the stack's Lambda Invoke API, as boto3 reaches it through AWS_ENDPOINT_URL_LAMBDA
    client = semantics.client("lambda")
    worker = semantics.environment.stack.function("AsyncWorker").name

    # When a function is invoked synchronously, once succeeding and once raising, and an unknown one is named
    ok = client.invoke(FunctionName=worker, Payload=json.dumps({"id": "sync-ok"}))
    bad = client.invoke(FunctionName=worker, Payload=json.dumps({"id": "sync-bad", "fail": True}))
    with pytest.raises(client.exceptions.ResourceNotFoundException):
        client.invoke(FunctionName="no-such-function", Payload="{}")

    # Then the result comes back as Lambda returns it, and the error as an Unhandled function error
    assert (ok["StatusCode"], json.loads(ok["Payload"].read())) == (200, {"handled": "sync-ok"})
    assert bad["FunctionError"] == "Unhandled"
    assert json.loads(bad["Payload"].read())["errorType"] == "ValueError"
    # Synchronous invocations have no destinations
    assert messages(semantics, "OutcomeQueue") == [] and messages(semantics, "FailureQueue") == []


def test_make_invoke_runs_a_function_inside_the_running_stack(semantics, capsys):
    # Given a running stack's endpoints, as `make dev` records them
    from devstack.invoke import invoke_running

    endpoints = {"aws": semantics.aws_url, "lambda": semantics.lambda_url}

    # When `make invoke` targets one of its functions with an event
    status = invoke_running(endpoints, "AsyncWorker", {"id": "from-make-invoke"}, {}, None)

    # Then it ran there, against that stack's state, and printed the function's result
    assert status == 0
    assert json.loads(capsys.readouterr().out) == {"handled": "from-make-invoke"}
    assert seen(semantics, "async:from-make-invoke") == 1
