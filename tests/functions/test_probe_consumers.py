"""ProbeRecorder and AlertHandler handlers on moto (resources from template.yaml), fed the envelope
fixtures as SQS delivers them after the fan-out; the schema hash the drift detector compares."""

from __future__ import annotations

import copy
import json

from mcp_backend.config import ProbeRecorderSettings
from mcp_backend.probes.alerts import ERROR_MESSAGE_CHARS
from mcp_backend.probes.recorder import ProbeRecorder
from mcp_backend.probes.schema import schema_hash
from tests.conftest import load_event

RECORDER, ALERTS = "ProbeRecorder", "AlertHandler"


def stored_results(local) -> list[dict]:
    import boto3

    return boto3.client("dynamodb").scan(TableName=local.table_name("MonitorTable"))["Items"]


def alert_observer(local) -> str:
    import boto3

    sqs = boto3.client("sqs")
    url = sqs.create_queue(QueueName="alert-observer")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    topic = local.stack.ensure("AlertTopic").ref
    boto3.client("sns").subscribe(
        TopicArn=topic, Protocol="sqs", Endpoint=arn, Attributes={"RawMessageDelivery": "true"}
    )
    return url


def received(url: str) -> list[dict]:
    import boto3

    messages = boto3.client("sqs").receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
    return [json.loads(m["Body"]) for m in messages]


def test_the_recorder_stores_every_result_once_with_a_ttl(local):
    # Given a batch of four OnSuccess envelopes (healthy, degraded fast/slow, error)
    event = load_event("probe_recorder/results-batch.json")

    # When it is delivered twice (a redelivery after a lost response)
    first = local.invoke(RECORDER, event)
    second = local.invoke(RECORDER, event)

    # Then both succeed and the table holds one probe_result per envelope, each expiring after probedAt
    assert first == second == {"batchItemFailures": []}
    items = stored_results(local)
    assert sorted(i["status"]["S"] for i in items) == ["degraded", "degraded", "error", "healthy"]
    assert all(i["itemType"]["S"] == "probe_result" and int(i["expiresAt"]["N"]) > 1768478400 for i in items)


def test_the_recorder_fails_only_a_malformed_record(local):
    # Given a batch whose second record is not an envelope
    event = copy.deepcopy(load_event("probe_recorder/results-batch.json"))
    event["Records"][1]["body"] = "not json"

    # When it is delivered
    response = local.invoke(RECORDER, event)

    # Then exactly that message is reported, the rest are stored
    assert response == {"batchItemFailures": [{"itemIdentifier": event["Records"][1]["messageId"]}]}
    assert len(stored_results(local)) == 3


class FlakyDynamoDB:
    """BatchWriteItem that leaves the first `unprocessed` puts of each call unprocessed, `failing_calls` times."""

    def __init__(self, failing_calls: int) -> None:
        self.failing_calls = failing_calls
        self.calls: list[int] = []

    def batch_write_item(self, RequestItems):
        [(table, requests)] = RequestItems.items()
        self.calls.append(len(requests))
        if self.failing_calls:
            self.failing_calls -= 1
            return {"UnprocessedItems": {table: requests[:2]}}
        return {"UnprocessedItems": {}}


def many_envelopes(count: int) -> dict:
    template = load_event("probe_recorder/results-batch.json")["Records"][0]
    records = []
    for n in range(count):
        body = json.loads(template["body"])
        body["requestContext"]["requestId"] = f"req-{n:03d}"
        records.append({**template, "messageId": f"msg-{n:03d}", "body": json.dumps(body)})
    return {"Records": records}


def test_the_recorder_writes_in_chunks_of_25_and_retries_unprocessed_items():
    # Given 30 results and a table that leaves two puts unprocessed on the first call
    dynamodb = FlakyDynamoDB(failing_calls=1)
    recorder = ProbeRecorder(ProbeRecorderSettings(monitor_table_name="t"), dynamodb, sleep=lambda _: None)

    # When the batch is recorded
    response = recorder.handle(many_envelopes(30))

    # Then calls carry at most 25 puts, the two leftovers are retried, and nothing fails
    assert dynamodb.calls == [25, 2, 5]
    assert response == {"batchItemFailures": []}


def test_items_still_unprocessed_after_the_retries_fail_their_records():
    # Given a table that never processes the first two puts of a call
    dynamodb = FlakyDynamoDB(failing_calls=100)
    recorder = ProbeRecorder(ProbeRecorderSettings(monitor_table_name="t"), dynamodb, sleep=lambda _: None)

    # When three results are recorded
    response = recorder.handle(many_envelopes(3))

    # Then the records of the two unwritten items are reported for redelivery
    assert sorted(f["itemIdentifier"] for f in response["batchItemFailures"]) == ["msg-000", "msg-001"]


def test_one_alert_per_endpoint_and_incident_window(local):
    # Given a subscriber on AlertTopic, an OnFailure envelope and an error result of the same endpoint
    observer = alert_observer(local)
    failure = load_event("alert_handler/failure-unreachable.json")
    error = load_event("alert_handler/success-error.json")

    # When both arrive within one window, and the failure is redelivered
    responses = [local.invoke(ALERTS, e) for e in (failure, error, failure)]

    # Then all records succeed and exactly one alert, with the envelope's details, was published
    assert all(r == {"batchItemFailures": []} for r in responses)
    [alert] = received(observer)
    assert alert["alert"] == "probe_failed" and alert["approximateInvokeCount"] == 1
    assert alert["error"]["errorType"] == "ProbeUnreachable" and alert["condition"] == "RetriesExhausted"


def test_a_later_window_alerts_again(local):
    observer = alert_observer(local)
    first = load_event("alert_handler/failure-unreachable.json")
    later = copy.deepcopy(first)
    body = json.loads(later["Records"][0]["body"])
    body["timestamp"] = "2026-01-15T12:20:01.250Z"  # the next 15-minute window
    later["Records"][0]["body"] = json.dumps(body)
    local.invoke(ALERTS, first)
    local.invoke(ALERTS, later)
    assert len(received(observer)) == 2


def test_the_schema_hash_ignores_order_and_extra_fields_but_not_descriptions():
    tools = [
        {"name": "b", "description": "B", "inputSchema": {"type": "object", "properties": {"x": {"type": "string"}}}},
        {"name": "a", "description": "A", "inputSchema": {"type": "object"}, "outputSchema": {"type": "object"}},
    ]
    reordered = [
        {"inputSchema": {"properties": {"x": {"type": "string"}}, "type": "object"}, "description": "B", "name": "b"},
        {"name": "a", "description": "A", "inputSchema": {"type": "object"}},
    ]
    changed = [tools[0], {**tools[1], "description": "A, now different"}]
    assert schema_hash(tools) == schema_hash(reordered)
    assert schema_hash(tools) != schema_hash(changed)
    assert len(schema_hash(tools)) == 64


def test_an_endpoints_error_text_reaches_the_alert_sanitised_and_truncated(local):
    # Given a subscriber on AlertTopic, and an error result whose JSON-RPC error the endpoint wrote: control
    # characters, a forged header line, 10,000 characters, and a code that is not a number
    observer = alert_observer(local)
    event = load_event("alert_handler/success-error.json")
    body = json.loads(event["Records"][0]["body"])
    hostile = "boom\r\nSubject: pay now\x1b[31m" + "A" * 10_000
    body["responsePayload"]["error"] = {"code": {"nested": "x"}, "message": hostile, "extra": "y" * 5000}
    event["Records"][0]["body"] = json.dumps(body)

    # When the alert handler publishes it
    assert local.invoke(ALERTS, event) == {"batchItemFailures": []}

    # Then the alert carries the message with printable characters only, bounded, and nothing else the endpoint sent
    [alert] = received(observer)
    message = alert["error"]["message"]
    assert message.startswith("boom  Subject: pay now") and "\r" not in message and "\x1b" not in message
    assert len(message) <= ERROR_MESSAGE_CHARS
    assert alert["error"] == {"code": None, "message": message}
