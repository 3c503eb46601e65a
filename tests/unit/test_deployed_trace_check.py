"""tests/deployed/trace_check.py, the deployed stack's trace read back from X-Ray, against X-Ray's API model
(botocore's Stubber checks every request's parameters against it): nothing is sent anywhere."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import boto3
import pytest
from botocore.stub import ANY, Stubber

from tests.deployed.trace_check import (
    ONE_JOB_SPANS,
    RETRIEVE_EVERY_SECONDS,
    missing_spans,
    new_sampled_traceparent,
    xray_trace_id,
)

TRACE_ID = "5759e988bd862e3fe1be46a994272793"
STARTED = datetime.now(UTC).replace(microsecond=0)


class Clock:
    """Time that moves only when the check sleeps."""

    def __init__(self) -> None:
        self.current = STARTED
        self.slept: list[float] = []

    def now(self) -> datetime:
        return self.current

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.current += timedelta(seconds=seconds)


def span_document(name: str) -> str:
    return json.dumps({"traceId": TRACE_ID, "spanId": "00f067aa0ba902b7", "name": name, "attributes": {}})


def retrieval(stub: Stubber, *, pages: list[list[str]], running_first: bool = False) -> None:
    """One StartTraceRetrieval, then ListRetrievedTraces: RUNNING once when asked, then COMPLETE over `pages`."""
    stub.add_response(
        "start_trace_retrieval",
        {"RetrievalToken": "token-1"},
        {"TraceIds": ["1-5759e988-bd862e3fe1be46a994272793"], "StartTime": ANY, "EndTime": ANY},
    )
    if running_first:
        stub.add_response(
            "list_retrieved_traces",
            {"RetrievalStatus": "RUNNING"},
            {"RetrievalToken": "token-1", "TraceFormat": "OTEL"},
        )
    for number, names in enumerate(pages):
        last = number == len(pages) - 1
        expected = {
            "RetrievalToken": "token-1",
            "TraceFormat": "OTEL",
            **({"NextToken": f"page-{number}"} if number else {}),
        }
        answer = {
            "RetrievalStatus": "COMPLETE",
            "Traces": [
                {
                    "Id": "1-5759e988-bd862e3fe1be46a994272793",
                    "Spans": [{"Id": "s", "Document": span_document(n)} for n in names],
                }
            ],
            **({} if last else {"NextToken": f"page-{number + 1}"}),
        }
        stub.add_response("list_retrieved_traces", answer, expected)


@pytest.fixture
def xray():
    client = boto3.client("xray", region_name="eu-west-1", aws_access_key_id="x", aws_secret_access_key="x")
    with Stubber(client) as stub:
        yield client, stub
        stub.assert_no_pending_responses()


def test_a_trace_holding_the_whole_job_over_two_pages_is_complete(xray):
    # Given X-Ray retrieving the trace: still running when first asked, then the job's spans over two pages
    client, stub = xray
    retrieval(stub, pages=[list(ONE_JOB_SPANS[:2]), [*ONE_JOB_SPANS[2:], "DynamoDB.UpdateItem"]], running_first=True)
    clock = Clock()

    # When the check looks for the job's spans
    missing = missing_spans(client, TRACE_ID, STARTED, now=clock.now, sleep=clock.sleep)

    # Then nothing is missing, found in one retrieval (it waited once for it to finish)
    assert missing == []
    assert RETRIEVE_EVERY_SECONDS not in clock.slept


def test_spans_not_yet_searchable_are_retrieved_again_until_the_deadline_then_named(xray):
    # Given a trace whose worker spans never arrive: each retrieval finds only the request's spans
    client, stub = xray
    for _ in range(3):
        retrieval(stub, pages=[["POST /mcp", "tools/call submit_analysis", "send JobQueue", "not json"]])
    clock = Clock()

    # When the check looks for the job's spans with a deadline of two retrievals' wait
    missing = missing_spans(
        client, TRACE_ID, STARTED, now=clock.now, sleep=clock.sleep, deadline_seconds=2 * RETRIEVE_EVERY_SECONDS
    )

    # Then it retrieved three times and names the spans that never came
    assert missing == ["process JobQueue", "execute_tool analyze_dataset"]
    assert clock.slept == [RETRIEVE_EVERY_SECONDS, RETRIEVE_EVERY_SECONDS]


def test_a_failed_retrieval_is_an_error_not_an_empty_trace(xray):
    # Given a retrieval X-Ray reports as failed
    client, stub = xray
    stub.add_response(
        "start_trace_retrieval", {"RetrievalToken": "token-1"}, {"TraceIds": ANY, "StartTime": ANY, "EndTime": ANY}
    )
    stub.add_response(
        "list_retrieved_traces", {"RetrievalStatus": "FAILED"}, {"RetrievalToken": "token-1", "TraceFormat": "OTEL"}
    )
    clock = Clock()

    # When the check looks for the job's spans / Then it raises, naming the status
    with pytest.raises(RuntimeError, match="FAILED"):
        missing_spans(client, TRACE_ID, STARTED, now=clock.now, sleep=clock.sleep)


def test_the_client_span_is_sampled_and_its_trace_id_is_xrays_too():
    # Given a new client span
    trace_id, traceparent = new_sampled_traceparent()

    # Then its traceparent is well formed and sampled, and X-Ray spells its trace id with the dashes
    version, in_header, parent, flags = traceparent.split("-")
    assert (version, in_header, len(parent), flags) == ("00", trace_id, 16, "01")
    assert xray_trace_id(TRACE_ID) == "1-5759e988-bd862e3fe1be46a994272793"
    with pytest.raises(ValueError):
        xray_trace_id("not-a-trace-id")
