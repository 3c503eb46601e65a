"""ToolWorker's call-log records, read back from the template's CallLogStream on moto."""

from __future__ import annotations

import json

import pytest
from moto.kinesis.models import KinesisBackend

from tests.conftest import load_event
from tests.functions.test_tool_worker import WORKER, job_body, job_item
from tests.kinesis import stream_json, stream_records


def call_log(local) -> list[dict]:
    return stream_json(local.stack.ensure("CallLogStream").ref)


def test_a_batch_puts_one_tool_call_per_success_and_job_failed_for_a_permanent_failure(local):
    # Given a batch with two jobs that succeed and one whose dataset is missing (a permanent failure)
    event = load_event("tool_worker/healthy-batch.json")
    event["Records"] = event["Records"][:3]
    event["Records"][2]["body"] = job_body("job-calllog-fail", url="s3://local-datasets/user-alice/missing.csv")

    # When the worker handles it
    local.invoke(WORKER, event)

    # Then the stream holds a tool_call for each success and job_failed for the failure (final at once)
    records = sorted(call_log(local), key=lambda r: r["jobId"])
    assert [(r["jobId"], r["eventType"]) for r in records] == [
        ("job-0001-fixture", "tool_call"),
        ("job-0002-fixture", "tool_call"),
        ("job-calllog-fail", "job_failed"),
    ]
    for record in records:
        assert record["userId"] == "user-alice" and record["toolName"] == "analyze_dataset"
        assert record["latencyMs"] >= 0 and record["occurredAt"] and record["recordedAt"]
    assert records[2]["errorType"] == "DatasetUnreachable"


def test_each_callers_records_share_a_partition_key_and_a_shard_in_the_order_the_calls_happened(local):
    # Given the healthy batch, with jobs from more than one user
    event = load_event("tool_worker/healthy-batch.json")
    submitted: dict[str, set[str]] = {}
    for record in event["Records"]:
        body = json.loads(record["body"])
        submitted.setdefault(body["userId"], set()).add(body["jobId"])
    assert len(submitted) > 1

    # When the worker handles it (its records at once)
    local.invoke(WORKER, event)

    # Then each user's records carry that user's partition key, on one shard, in the order the calls ended
    records = stream_records(local.stack.ensure("CallLogStream").ref)
    for user, job_ids in submitted.items():
        mine = [r for r in records if r["PartitionKey"] == f"user#{user}"]
        assert len({r["ShardId"] for r in mine}) == 1, user
        in_stream_order = [json.loads(r["Data"]) for r in sorted(mine, key=lambda r: int(r["SequenceNumber"]))]
        assert {data["jobId"] for data in in_stream_order} == job_ids
        occurred = [data["occurredAt"] for data in in_stream_order]
        assert occurred == sorted(occurred)


def test_the_final_failed_attempt_puts_job_failed(local):
    # Given the last-attempt poison fixture
    event = load_event("tool_worker/last-attempt-poison.json")

    # When the worker handles it
    local.invoke(WORKER, event)

    # Then the call log says job_failed, with the error type and no input
    (record,) = call_log(local)
    assert record["eventType"] == "job_failed"
    assert record["errorType"] == "DatasetUnreachable"
    assert "input" not in record and "dataset_url" not in json.dumps(record)


def test_a_redelivered_completed_job_logs_no_second_call(local):
    # Given job-0001 completed and logged
    local.invoke(WORKER, load_event("tool_worker/healthy-batch.json"))
    before = len(call_log(local))

    # When its duplicate is redelivered
    local.invoke(WORKER, load_event("tool_worker/redelivered-duplicate.json"))

    # Then nothing new is logged
    assert len(call_log(local)) == before


def test_a_failing_call_log_does_not_fail_the_job_and_is_counted(local, monkeypatch, capsys, caplog):
    # Given a stream that reports every PutRecords entry as throttled
    def throttled(self, stream_arn, stream_name, records):
        return {
            "FailedRecordCount": len(records),
            "Records": [
                {"ErrorCode": "ProvisionedThroughputExceededException", "ErrorMessage": "Rate exceeded"}
                for _ in records
            ],
        }

    monkeypatch.setattr(KinesisBackend, "put_records", throttled)
    event = load_event("tool_worker/redelivered-duplicate.json")
    capsys.readouterr()

    # When the worker runs the job
    response = local.invoke(WORKER, event)

    # Then the job succeeds, and the loss is logged and counted without any payload
    assert response == {"batchItemFailures": []}
    assert job_item(local, "job-0001-fixture")["status"] == "SUCCEEDED"
    (dropped,) = [record for record in caplog.records if record.getMessage() == "call-log records dropped"]
    assert dropped.dropped == 1 and dropped.error_codes == ["ProvisionedThroughputExceededException"]
    assert "s3://" not in json.dumps(vars(dropped), default=str)
    emf = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith('{"_aws"')]
    (metric,) = [blob for blob in emf if "CallLogRecordsDropped" in blob]
    assert metric["CallLogRecordsDropped"] in (1.0, [1.0])


@pytest.mark.parametrize("error", ["ResourceNotFoundException", "InternalFailure"])
def test_a_call_log_request_error_does_not_fail_the_job(local, monkeypatch, error):
    # Given PutRecords itself fails
    from moto.core.exceptions import JsonRESTError

    def broken(self, stream_arn, stream_name, records):
        raise JsonRESTError(error, "broken for the test")

    monkeypatch.setattr(KinesisBackend, "put_records", broken)

    # When the worker runs a job
    response = local.invoke(WORKER, load_event("tool_worker/redelivered-duplicate.json"))

    # Then the job still succeeds
    assert response == {"batchItemFailures": []}
    assert job_item(local, "job-0001-fixture")["status"] == "SUCCEEDED"
