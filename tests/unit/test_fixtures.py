"""Every fixture in events/ parses with the Powertools Parser model of the source that delivers it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from aws_lambda_powertools.utilities.parser import parse
from aws_lambda_powertools.utilities.parser.models import (
    DynamoDBStreamModel,
    EventBridgeModel,
    KinesisDataStreamModel,
    LambdaFunctionUrlModel,
    SqsModel,
)

from mcp_backend.jobs.models import JobMessage
from mcp_backend.probes.envelope import DestinationEnvelope
from mcp_backend.probes.worker import ProbeTarget

EVENTS = Path(__file__).resolve().parents[2] / "events"
MODEL_BY_EVENT_SOURCE = {
    "aws:sqs": SqsModel,
    "aws:kinesis": KinesisDataStreamModel,
    "aws:dynamodb": DynamoDBStreamModel,
}
# (a fixture's `.state.json` beside it is what `make invoke` seeds first, not an event)
FIXTURES = sorted(p for p in EVENTS.rglob("*.json") if "datasets" not in p.parts and not p.name.endswith(".state.json"))


def model_for(event: dict):
    if "Records" not in event and event.get("detail-type") == "Scheduled Event":
        return EventBridgeModel  # an EventBridge schedule tick (ProbeDispatcher)
    if "Records" not in event and "serverId" in event:
        return ProbeTarget  # ProbeWorker's asynchronous invocation payload
    if "Records" not in event and "lambda-url" in event.get("requestContext", {}).get("domainName", ""):
        return LambdaFunctionUrlModel  # a Function URL request (payload format 2.0): one request, no Records
    sources = {record.get("eventSource") for record in event.get("Records", [])}
    assert len(sources) == 1, f"one event source per fixture, got {sources}"
    return MODEL_BY_EVENT_SOURCE[sources.pop()]


def test_there_are_fixtures():
    assert FIXTURES


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: str(p.relative_to(EVENTS)))
def test_fixture_matches_its_source_model(path):
    event = json.loads(path.read_text())
    parsed = parse(event=event, model=model_for(event))
    if "Records" in event:
        assert len(parsed.Records) == len(event["Records"])


@pytest.mark.parametrize("path", sorted((EVENTS / "tool_worker").glob("*.json")), ids=lambda p: p.name)
def test_tool_worker_fixture_bodies_are_jobs_except_the_deliberately_malformed(path):
    records = json.loads(path.read_text())["Records"]
    malformed = []
    for index, record in enumerate(records):
        try:
            JobMessage.model_validate_json(record["body"])
        except ValueError:
            malformed.append(index + 1)
    assert malformed == ([7] if "malformed" in path.name else [])


@pytest.mark.parametrize("path", sorted((EVENTS / "mcp_server").glob("*.json")), ids=lambda p: p.name)
def test_mcp_server_fixtures_are_function_url_posts_of_one_json_rpc_message(path):
    from mcp_types import jsonrpc_message_adapter

    request = parse(event=json.loads(path.read_text()), model=LambdaFunctionUrlModel)
    assert request.requestContext.http.method == "POST"
    assert request.rawPath in ("/mcp", "/mcp/")
    assert jsonrpc_message_adapter.validate_json(request.body)


PROBE_ENVELOPE_FIXTURES = sorted((EVENTS / "alert_handler").glob("*.json")) + sorted(
    (EVENTS / "probe_recorder").glob("*.json")
)


@pytest.mark.parametrize("path", PROBE_ENVELOPE_FIXTURES, ids=lambda p: str(p.relative_to(EVENTS)))
def test_probe_queue_fixture_bodies_are_destination_envelopes_of_their_condition(path):
    # The fan-out uses raw delivery: each SQS body is the envelope itself, not an SNS notification.
    for record in json.loads(path.read_text())["Records"]:
        envelope = DestinationEnvelope.from_body(record["body"])
        assert envelope.succeeded == ("failure" not in path.name)
        assert envelope.request_context.approximate_invoke_count == 1
        expected_keys = {"status", "latencyMs"} if envelope.succeeded else {"errorType", "errorMessage"}
        assert expected_keys <= set(envelope.response_payload)
