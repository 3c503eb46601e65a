"""CallLogWriter without AWS: batching within PutRecords limits, retrying failed entries, giving up."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from mcp_backend.calllog.models import CallLogEventType, CallLogRecord
from mcp_backend.calllog.writer import (
    MAX_BYTES_PER_REQUEST,
    MAX_RECORDS_PER_REQUEST,
    CallLogUnavailable,
    CallLogWriter,
)


class FakeKinesis:
    """Records every PutRecords request; `failures` says which entries fail on which call."""

    def __init__(self, failures: dict[int, set[int]] | None = None, error: str | None = None) -> None:
        self.requests: list[list[dict]] = []
        self.failures = failures or {}
        self.error = error

    def put_records(self, StreamName: str, Records: list[dict]) -> dict:
        call = len(self.requests)
        self.requests.append(Records)
        if self.error:
            raise ClientError({"Error": {"Code": self.error, "Message": "x"}}, "PutRecords")
        failed = self.failures.get(call, set())
        return {
            "FailedRecordCount": len(failed),
            "Records": [
                {"ErrorCode": "ProvisionedThroughputExceededException"} if i in failed else {"SequenceNumber": str(i)}
                for i in range(len(Records))
            ],
        }


def tool_call(user: str = "u-1", index: int = 0) -> CallLogRecord:
    return CallLogRecord(
        event_type=CallLogEventType.TOOL_CALL, user_id=user, tool_name="analyze_dataset", job_id=f"job-{index}"
    )


def writer(client: FakeKinesis, **options) -> CallLogWriter:
    return CallLogWriter("calls", client, sleep=lambda seconds: None, **options)


def test_more_than_500_records_are_split_into_requests_of_at_most_500():
    # Given 1201 records
    client = FakeKinesis()

    # When they are put
    outcome = writer(client).put(tool_call(index=i) for i in range(1201))

    # Then three requests carried them, none over the limit
    assert [len(r) for r in client.requests] == [MAX_RECORDS_PER_REQUEST, MAX_RECORDS_PER_REQUEST, 201]
    assert (outcome.written, outcome.dropped) == (1201, 0)


def test_requests_stay_within_the_5_mb_limit():
    # Given records of about 600 KB each (model_copy skips validation, so a long tool name pads them)
    client = FakeKinesis()
    big = [tool_call(index=i).model_copy(update={"tool_name": "t" * 600_000}) for i in range(20)]

    # When they are put
    outcome = writer(client).put(big)

    # Then no request is over 5 MB and all records were written
    for request in client.requests:
        assert sum(len(e["Data"]) + len(e["PartitionKey"]) for e in request) <= MAX_BYTES_PER_REQUEST
    assert len(client.requests) > 1 and outcome.written == 20


def test_only_entries_reported_failed_are_retried():
    # Given a first response in which entries 1 and 3 of 5 are throttled
    client = FakeKinesis(failures={0: {1, 3}})
    records = [tool_call(index=i) for i in range(5)]

    # When they are put
    outcome = writer(client).put(records)

    # Then the retry carries exactly those two, and everything is written once
    assert [len(r) for r in client.requests] == [5, 2]
    assert client.requests[1] == [client.requests[0][1], client.requests[0][3]]
    assert (outcome.written, outcome.dropped) == (5, 0)


def test_entries_failing_every_attempt_are_dropped_after_the_bounded_retries():
    # Given a stream that throttles entry 0 on every call
    client = FakeKinesis(failures={i: {0} for i in range(10)})

    # When two records are put with 3 attempts allowed
    outcome = writer(client, max_attempts=3).put([tool_call(index=0), tool_call(index=1)])

    # Then it tried three times, wrote one and dropped one, without raising
    assert len(client.requests) == 3
    assert (outcome.written, outcome.dropped) == (1, 1)
    assert outcome.error_codes == {"ProvisionedThroughputExceededException"}


def test_a_permanent_error_is_not_retried():
    client = FakeKinesis(error="ResourceNotFoundException")
    outcome = writer(client).put([tool_call()])
    assert len(client.requests) == 1
    assert outcome.dropped == 1


def test_a_throttled_request_is_retried():
    client = FakeKinesis(error="ProvisionedThroughputExceededException")
    outcome = writer(client, max_attempts=4).put([tool_call()])
    assert len(client.requests) == 4
    assert outcome.dropped == 1


def test_a_writer_that_must_not_lose_records_raises_after_giving_up():
    client = FakeKinesis(error="ResourceNotFoundException")
    with pytest.raises(CallLogUnavailable, match="ResourceNotFoundException"):
        writer(client, raise_on_loss=True).put([tool_call()])


def test_flush_sends_the_buffer_once_and_empties_it():
    client = FakeKinesis()
    log = writer(client)
    log.add(tool_call(index=1))
    log.add(tool_call(index=2))
    assert log.flush().written == 2
    assert log.flush().written == 0
    assert len(client.requests) == 1


def test_backoff_is_bounded():
    log = writer(FakeKinesis(), base_delay_seconds=0.1, max_delay_seconds=0.3)
    assert all(0 <= log._backoff(attempt) <= 0.3 for attempt in range(1, 20))


@pytest.mark.parametrize(
    ("fields", "key"),
    [
        ({"event_type": "tool_error", "user_id": "u-7", "tool_name": "t"}, "user#u-7"),
        ({"event_type": "schema_drift", "server_id": "srv-1"}, "server#srv-1"),
        ({"event_type": "schema_drift", "server_id": "srv-1", "user_id": "u-7"}, "server#srv-1"),
    ],
)
def test_partition_key_is_the_caller_or_for_probe_records_the_endpoint(fields, key):
    assert CallLogRecord(**fields).partition_key == key


@pytest.mark.parametrize(
    "fields",
    [{"event_type": "tool_call", "user_id": "u"}, {"event_type": "schema_drift", "tool_name": "t"}],
)
def test_a_record_without_its_subject_is_rejected(fields):
    with pytest.raises(ValueError, match="need"):
        CallLogRecord(**fields)
