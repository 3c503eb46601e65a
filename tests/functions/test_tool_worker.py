"""ToolWorker through its real handler, on moto resources created from template.yaml."""

from __future__ import annotations

import datetime as dt
import json
import os
import resource
import signal
import uuid

import boto3
import pytest
import time_machine
from botocore.exceptions import ClientError

from devstack.runtime.in_process import LocalLambdaContext
from mcp_backend.batch import UnexpectedEventSource
from mcp_backend.observability import tool_runs
from tests.conftest import load_event

WORKER = "ToolWorker"


def job_body(job_id: str, user: str = "user-alice", url: str = "s3://local-datasets/user-alice/sales.csv") -> str:
    return json.dumps({"jobId": job_id, "userId": user, "tool": "analyze_dataset", "input": {"dataset_url": url}})


def job_item(local, job_id: str) -> dict | None:
    from mcp_backend.jobs.store import JobStore

    return JobStore(local.table_name("JobTable")).get(job_id)


def record_job_ids(event: dict) -> list[str]:
    ids = []
    for record in event["Records"]:
        try:
            ids.append(json.loads(record["body"])["jobId"])
        except ValueError:
            ids.append(None)
    return ids


class SimulatedKill(BaseException):
    """Not an Exception: like a timeout or OOM kill, nothing in the handler gets to clean up."""


class ThrottlingS3:
    """S3 as it answers under load: keys naming `unavailable` get SlowDown (HTTP 503), a transient error."""

    def __init__(self, real) -> None:
        self.real = real

    def get_object(self, *, Bucket: str, Key: str):
        if "unavailable" in Key:
            raise ClientError(
                {
                    "Error": {"Code": "SlowDown", "Message": "Reduce your request rate."},
                    "ResponseMetadata": {"HTTPStatusCode": 503},
                },
                "GetObject",
            )
        return self.real.get_object(Bucket=Bucket, Key=Key)


@pytest.fixture
def throttling_s3(monkeypatch):
    from mcp_backend.tools import fetch

    monkeypatch.setattr(fetch, "_default_s3_client", lambda policy: ThrottlingS3(boto3.client("s3")))


UNAVAILABLE = "s3://local-datasets/user-alice/unavailable.csv"


def dead_letters(local) -> list[dict]:
    return (
        boto3.client("sqs")
        .receive_message(
            QueueUrl=local.queue_url("JobDeadLetterQueue"), MaxNumberOfMessages=10, MessageAttributeNames=["All"]
        )
        .get("Messages", [])
    )


def attribute(message: dict, name: str) -> str:
    return message["MessageAttributes"][name]["StringValue"]


def batch_of_three_with(job_id: str, url: str) -> tuple[dict, dict]:
    """Three records of the healthy batch, the second replaced by a job reading `url`: the event and that record."""
    event = load_event("tool_worker/healthy-batch.json")
    event["Records"] = event["Records"][:3]
    event["Records"][1]["body"] = job_body(job_id, url=url)
    return event, event["Records"][1]


def test_batch_of_ten_with_malformed_seventh_dead_letters_only_that_record_with_its_reason(local):
    # Given the fixture batch of 10 whose 7th record is not a job
    event = load_event("tool_worker/batch-of-10-record-7-malformed.json")
    seventh = event["Records"][6]

    # When the worker handles it
    response = local.invoke(WORKER, event)

    # Then nothing is left to retry: the 7th message is in the DLQ with the reason, recorded under its id,
    # and the other nine jobs ran once and succeeded
    assert response == {"batchItemFailures": []}
    [dead] = dead_letters(local)
    assert dead["Body"] == seventh["body"]
    assert attribute(dead, "failureType") == "MalformedJobMessage"
    assert attribute(dead, "failureReason") == "message body is not valid JSON"
    assert attribute(dead, "sourceMessageId") == seventh["messageId"]
    failed = job_item(local, f"message-{seventh['messageId']}")
    assert (failed["status"], failed["failedMessageId"]) == ("FAILED", dead["MessageId"])
    for job_id in record_job_ids(event):
        if job_id is None:
            continue
        item = job_item(local, job_id)
        assert item["status"] == "SUCCEEDED", job_id
        assert item["runs"] == 1
        assert item["result"]["rowCount"] == 6


def test_a_permanent_failure_fails_the_job_at_once_and_dead_letters_its_message(local):
    # Given a healthy batch in which one job's dataset does not exist (NoSuchKey: no retry can help)
    event, missing = batch_of_three_with("job-missing-once", "s3://local-datasets/user-alice/missing.csv")

    # When the worker handles it on the message's first receive
    response = local.invoke(WORKER, event)

    # Then the job is FAILED with the reason now, its message is in the DLQ with that reason, and no record
    # is left for SQS to redeliver
    assert response == {"batchItemFailures": []}
    item = job_item(local, "job-missing-once")
    assert (item["status"], item["error"]["type"], item["runs"]) == ("FAILED", "DatasetUnreachable", 1)
    [dead] = dead_letters(local)
    assert (dead["Body"], dead["MessageId"]) == (missing["body"], item["failedMessageId"])
    assert attribute(dead, "failureType") == "DatasetUnreachable"
    assert "does not exist" in attribute(dead, "failureReason")
    assert [job_item(local, job_id)["status"] for job_id in record_job_ids(event)] == [
        "SUCCEEDED",
        "FAILED",
        "SUCCEEDED",
    ]


def test_a_result_over_the_cap_fails_its_job_alone_with_the_limit_named(local):
    # Given results capped at 4 KiB, and a batch in which one job analyses a dataset of 60 columns (a summary of
    # about 10 KB) between two small ones
    local.function_overrides["JOB_RESULT_MAX_BYTES"] = "4096"
    header = ",".join(f"column_{n}" for n in range(60))
    row = ",".join(str(n) for n in range(60))
    wide = "s3://local-datasets/user-alice/wide.csv"
    boto3.client("s3").put_object(Bucket="local-datasets", Key="user-alice/wide.csv", Body=f"{header}\n{row}\n")
    event = load_event("tool_worker/healthy-batch.json")
    event["Records"] = event["Records"][:3]
    event["Records"][1]["body"] = job_body("job-wide-result", url=wide)

    # When the worker handles the batch
    response = local.invoke(WORKER, event)

    # Then that job alone fails at once with ResultTooLarge naming the cap (dead-lettered, never retried), and the
    # others of its batch succeed
    assert response == {"batchItemFailures": []}
    item = job_item(local, "job-wide-result")
    assert (item["status"], item["error"]["type"]) == ("FAILED", "ResultTooLarge")
    assert "4096-byte limit" in item["error"]["message"]
    assert [job_item(local, job_id)["status"] for job_id in record_job_ids(event)] == [
        "SUCCEEDED",
        "FAILED",
        "SUCCEEDED",
    ]


class HungryS3:
    """S3 whose objects named `hungry` need more memory than the function has. Read in the job's own process,
    that process runs out: killed by the kernel's OOM killer (SIGKILL), or its allocation refused (MemoryError,
    under an address-space cap a little above what it uses). Read in the worker's own process (the test's), it
    refuses to, rather than take the test run down with it."""

    def __init__(self, real, ending: str, worker_pid: int) -> None:
        self.real = real
        self.ending = ending
        self.worker_pid = worker_pid

    def get_object(self, *, Bucket: str, Key: str):
        if "hungry" in Key:
            if os.getpid() == self.worker_pid:
                raise AssertionError("the job's tool ran in the worker's own process")
            if self.ending == "killed":
                os.kill(os.getpid(), signal.SIGKILL)
            address_space = int(open("/proc/self/statm").read().split()[0]) * resource.getpagesize()
            resource.setrlimit(resource.RLIMIT_AS, (address_space + 64 * 1024 * 1024, resource.RLIM_INFINITY))
            bytearray(128 * 1024 * 1024)  # more than the cap leaves
        return self.real.get_object(Bucket=Bucket, Key=Key)


@pytest.mark.parametrize("ending", ["killed", "refused"])
def test_a_job_that_runs_out_of_memory_fails_alone_and_its_siblings_succeed_once(local, monkeypatch, ending):
    # Given a batch of three whose second job's dataset needs more memory than the function has
    from mcp_backend.tools import fetch

    worker_pid = os.getpid()
    monkeypatch.setattr(fetch, "_default_s3_client", lambda policy: HungryS3(boto3.client("s3"), ending, worker_pid))
    event, hungry = batch_of_three_with("job-hungry", "s3://local-datasets/user-alice/hungry.csv")
    local.function_overrides["TOOL_RUNS_APART"] = "true"  # the in-process stack runs tools in-thread by default

    # When the worker handles it on the messages' first receive
    response = local.invoke(WORKER, event)

    # Then nothing is left for SQS to redeliver: the hungry job is FAILED as out of memory and its message is
    # in the DLQ with that reason, and the other two jobs ran once and succeeded
    assert response == {"batchItemFailures": []}
    item = job_item(local, "job-hungry")
    assert (item["status"], item["error"]["type"]) == ("FAILED", "ToolOutOfMemory")
    assert "out of memory" in item["error"]["message"]
    [dead] = dead_letters(local)
    assert (dead["Body"], attribute(dead, "failureType")) == (hungry["body"], "ToolOutOfMemory")
    assert "out of memory" in attribute(dead, "failureReason")
    for job_id in record_job_ids(event):
        if job_id != "job-hungry":
            assert (job_item(local, job_id)["status"], job_item(local, job_id)["runs"]) == ("SUCCEEDED", 1)


def test_an_unknown_job_type_fails_that_record_alone_with_a_clear_reason(local):
    # Given a batch whose second message's jobType attribute names no job-capable tool
    event = load_event("tool_worker/healthy-batch.json")
    event["Records"] = event["Records"][:3]
    unknown = event["Records"][1]
    unknown["messageAttributes"] = {"jobType": {"stringValue": "mine_bitcoin", "dataType": "String"}}
    for record in (event["Records"][0], event["Records"][2]):
        record["messageAttributes"] = {"jobType": {"stringValue": "analyze_dataset", "dataType": "String"}}

    # When the worker handles it
    response = local.invoke(WORKER, event)

    # Then only that job failed, with a reason naming the jobType, and its message went to the DLQ
    assert response == {"batchItemFailures": []}
    job_ids = record_job_ids(event)
    item = job_item(local, job_ids[1])
    assert item["status"] == "FAILED"
    assert item["error"] == {
        "type": "UnknownTool",
        "message": "no job-capable tool named 'mine_bitcoin' (jobType attribute)",
    }
    [dead] = dead_letters(local)
    assert (attribute(dead, "failureType"), attribute(dead, "jobType")) == ("UnknownTool", "mine_bitcoin")
    assert [job_item(local, job_ids[i])["status"] for i in (0, 2)] == ["SUCCEEDED", "SUCCEEDED"]


def test_whole_batch_delivered_twice_runs_each_job_once(local):
    # Given a healthy batch that has been processed already
    event = load_event("tool_worker/healthy-batch.json")
    first = local.invoke(WORKER, event)

    # When SQS delivers the same batch again (at-least-once delivery)
    second = local.invoke(WORKER, event)

    # Then both deliveries succeed and every job's body ran exactly once
    assert first == second == {"batchItemFailures": []}
    for job_id in record_job_ids(event):
        item = job_item(local, job_id)
        assert item["status"] == "SUCCEEDED"
        assert item["runs"] == 1


def test_redelivered_duplicate_fixture_does_not_run_the_job_again(local):
    # Given job-0001 completed from the healthy batch
    local.invoke(WORKER, load_event("tool_worker/healthy-batch.json"))
    before = job_item(local, "job-0001-fixture")

    # When its redelivered duplicate (ApproximateReceiveCount 2) arrives
    response = local.invoke(WORKER, load_event("tool_worker/redelivered-duplicate.json"))

    # Then it is acknowledged and the job record is unchanged
    assert response == {"batchItemFailures": []}
    assert job_item(local, "job-0001-fixture") == before


def test_same_job_id_from_another_user_is_dead_lettered_and_leaves_the_original_untouched(local):
    # Given alice's job has completed
    local.invoke(WORKER, load_event("tool_worker/healthy-batch.json"))
    original = job_item(local, "job-0001-fixture")
    event = load_event("tool_worker/redelivered-duplicate.json")
    record = event["Records"][0]
    record["body"] = job_body("job-0001-fixture", user="user-mallory")

    # When mallory's message reuses the id
    response = local.invoke(WORKER, event)

    # Then it is never run: it goes to the DLQ with the reason, and alice's job keeps its owner, status and result
    assert response == {"batchItemFailures": []}
    [dead] = dead_letters(local)
    assert attribute(dead, "failureType") == "JobPayloadMismatch"
    assert job_item(local, "job-0001-fixture") == original


def test_same_job_id_with_another_input_is_refused_while_the_job_waits(local):
    # Given alice's job recorded at submit (PENDING, with its payload's fingerprint), not run yet
    from mcp_backend.jobs.models import JobMessage
    from mcp_backend.jobs.store import JobStore

    submitted = JobMessage(
        job_id="job-0001-fixture",
        user_id="user-alice",
        tool="analyze_dataset",
        input={"dataset_url": "s3://local-datasets/user-alice/sales.csv"},
    )
    assert JobStore(local.table_name("JobTable")).create_pending(submitted)
    event = load_event("tool_worker/redelivered-duplicate.json")

    # When a message with that id but another input arrives first
    event["Records"][0]["body"] = job_body("job-0001-fixture", url="s3://local-datasets/user-alice/other.csv")
    refused = local.invoke(WORKER, event)

    # Then it is dead-lettered unrun and the job still waits for its own message
    assert refused == {"batchItemFailures": []}
    assert attribute(dead_letters(local)[0], "failureType") == "JobPayloadMismatch"
    assert (job_item(local, "job-0001-fixture")["status"], job_item(local, "job-0001-fixture").get("runs")) == (
        "PENDING",
        None,
    )
    # And its own message then runs it
    event["Records"][0]["body"] = submitted.body()
    assert local.invoke(WORKER, event) == {"batchItemFailures": []}
    assert job_item(local, "job-0001-fixture")["status"] == "SUCCEEDED"


def test_in_progress_record_of_a_killed_invocation_blocks_retries_until_it_expires(local, monkeypatch):
    # Given an invocation that was killed mid-job, leaving an INPROGRESS idempotency record
    from mcp_backend.tools import analyze_dataset

    event = load_event("tool_worker/redelivered-duplicate.json")
    real_analysis = analyze_dataset.analyze_dataset
    timeout = local.stack.function(WORKER).timeout

    def killed(*args, **kwargs):
        raise SimulatedKill

    start = dt.datetime.now(dt.UTC)
    with time_machine.travel(start, tick=False):
        monkeypatch.setattr(analyze_dataset, "analyze_dataset", killed)
        with pytest.raises(SimulatedKill):
            local.invoke(WORKER, event)
        monkeypatch.setattr(analyze_dataset, "analyze_dataset", real_analysis)

    # When SQS redelivers it before the function timeout + 5 s has passed
    with time_machine.travel(start + dt.timedelta(seconds=timeout), tick=False):
        blocked = local.invoke(WORKER, event)
    # Then the retry fails without running the job
    assert blocked == {"batchItemFailures": [{"itemIdentifier": event["Records"][0]["messageId"]}]}
    assert job_item(local, "job-0001-fixture")["runs"] == 1
    assert job_item(local, "job-0001-fixture")["status"] == "RUNNING"

    # When it is redelivered after the INPROGRESS expiry
    with time_machine.travel(start + dt.timedelta(seconds=timeout + 6), tick=False):
        retried = local.invoke(WORKER, event)
    # Then the job runs and completes
    assert retried == {"batchItemFailures": []}
    item = job_item(local, "job-0001-fixture")
    assert (item["status"], item["runs"]) == ("SUCCEEDED", 2)


def test_batch_where_every_record_fails_reports_every_record(local, throttling_s3):
    # Given a batch whose every job reads from a throttling S3 (a transient failure)
    event = load_event("tool_worker/healthy-batch.json")
    for index, record in enumerate(event["Records"]):
        record["body"] = job_body(f"job-missing-{index}", url=UNAVAILABLE)

    # When the worker handles it
    response = local.invoke(WORKER, event)

    # Then every record is reported (the invocation itself does not error) and no job succeeded
    assert response == {"batchItemFailures": [{"itemIdentifier": r["messageId"]} for r in event["Records"]]}
    for index in range(len(event["Records"])):
        assert job_item(local, f"job-missing-{index}")["status"] == "RUNNING"


@pytest.mark.parametrize(
    "event",
    [
        {"detail-type": "Scheduled Event", "source": "aws.events"},
        {"Records": []},
        load_event("tool_worker/healthy-batch.json")["Records"][0],
        {"Records": [{"eventSource": "aws:kinesis", "kinesis": {}}]},
    ],
    ids=["eventbridge", "empty-records", "bare-record", "kinesis"],
)
def test_non_sqs_event_fails_fast_with_a_clear_error(local, event):
    # Given an event that is not an SQS batch
    # When the worker is invoked with it
    with pytest.raises(UnexpectedEventSource, match="aws:sqs"):
        local.invoke(WORKER, event)
    # Then nothing was written
    assert boto3.client("dynamodb").scan(TableName=local.table_name("JobTable"))["Count"] == 0


def test_last_attempt_of_a_transient_failure_marks_the_job_failed_with_the_reason(local, throttling_s3):
    # Given the last-attempt fixture (ApproximateReceiveCount = maxReceiveCount), its dataset throttled
    event = load_event("tool_worker/last-attempt-poison.json")
    event["Records"][0]["body"] = event["Records"][0]["body"].replace("missing.csv", "unavailable.csv")

    # When the worker handles it
    response = local.invoke(WORKER, event)

    # Then the record still fails (SQS moves it to the DLQ) and the job says why
    assert response["batchItemFailures"] == [{"itemIdentifier": event["Records"][0]["messageId"]}]
    item = job_item(local, "job-0900-fixture")
    assert item["status"] == "FAILED"
    assert item["error"]["type"] == "DatasetTemporarilyUnreachable"
    assert item["failedMessageId"] == event["Records"][0]["messageId"]


def test_a_transiently_failing_message_is_received_three_times_then_sits_in_the_dlq_with_its_job_failed(
    local, throttling_s3
):
    # Given a job message whose dataset S3 keeps throttling, on the template's job queue
    sqs = boto3.client("sqs")
    message_id = sqs.send_message(
        QueueUrl=local.queue_url("JobQueue"),
        MessageBody=job_body("job-poison-0001", url=UNAVAILABLE),
    )["MessageId"]
    source = local.sqs_source_for(WORKER)
    visibility = int(
        sqs.get_queue_attributes(QueueUrl=local.queue_url("JobQueue"), AttributeNames=["VisibilityTimeout"])[
            "Attributes"
        ]["VisibilityTimeout"]
    )
    max_receives = json.loads(
        sqs.get_queue_attributes(QueueUrl=local.queue_url("JobQueue"), AttributeNames=["RedrivePolicy"])["Attributes"][
            "RedrivePolicy"
        ]
    )["maxReceiveCount"]

    # When the event source polls, and each failure waits out the visibility timeout
    start = dt.datetime.now(dt.UTC)
    attempts = []
    for receive in range(max_receives + 1):
        with time_machine.travel(start + dt.timedelta(seconds=receive * (visibility + 1)), tick=False):
            attempts.append(source.poll_once())
            dead = sqs.receive_message(QueueUrl=local.queue_url("JobDeadLetterQueue"), MaxNumberOfMessages=10)

    # Then it was delivered maxReceiveCount times, never again, and now sits in the DLQ
    assert [a.failed_ids for a in attempts] == [(message_id,)] * max_receives + [()]
    assert local.queue_depth("JobQueue") == 0
    assert [m["MessageId"] for m in dead["Messages"]] == [message_id]
    item = job_item(local, "job-poison-0001")
    assert item["status"] == "FAILED"
    assert item["error"]["type"] == "DatasetTemporarilyUnreachable"
    assert item["runs"] == max_receives


def test_worker_logs_carry_no_payload(local, capsys):
    # Given a job whose input holds a secret-looking value
    event = load_event("tool_worker/redelivered-duplicate.json")
    secret = f"s3://local-datasets/user-alice/missing.csv?token={uuid.uuid4().hex}"
    event["Records"][0]["body"] = job_body("job-secret-0001", url=secret)

    # When it fails and is logged
    local.invoke(WORKER, event)

    # Then the secret is in no log line, and the job's recorded error does not carry it either
    out = capsys.readouterr()
    assert secret.split("=")[1] not in out.out + out.err
    assert secret.split("=")[1] not in json.dumps(job_item(local, "job-secret-0001"), default=str)


def test_in_progress_window_follows_the_configured_timeout(local):
    # Given the worker as the template configures it
    from mcp_backend.idempotency import InProgressWindow

    timeout = local.stack.function(WORKER).timeout
    context = LocalLambdaContext("f", "arn", 128, timeout_seconds=1)

    # When the worker's INPROGRESS window is derived from its settings
    window = InProgressWindow(context, int(local.stack.function(WORKER).environment["FUNCTION_TIMEOUT_SECONDS"]))

    # Then it is the function's Timeout + 5 s, whatever time the context has left
    assert window.get_remaining_time_in_millis() == (timeout + 5) * 1000
    assert window.function_name == "f"


def emf_records(output: str) -> list[dict]:
    blobs = [json.loads(line) for line in output.splitlines() if line.startswith('{"_aws"')]
    return [blob for blob in blobs if "ToolInvocation" in blob]


def test_a_batch_emits_one_blob_per_tool_with_a_value_per_job_and_the_default_dimensions(local, capsys):
    # Given a batch with one job that succeeds and one that fails, both of the same tool
    event = load_event("tool_worker/healthy-batch.json")
    event["Records"] = event["Records"][:2]
    event["Records"][1]["body"] = job_body("job-metric-fail", url="s3://local-datasets/user-alice/missing.csv")
    tool_runs.flush()  # (runs other functions in this process left pending)
    capsys.readouterr()

    # When the worker handles it
    local.invoke(WORKER, event)

    # Then one EMF blob for the tool carries ToolName next to the one service dimension and Environment: two
    # invocations, one success and one error, and a duration per job
    [record] = emf_records(capsys.readouterr().out)
    dimensions = record["_aws"]["CloudWatchMetrics"][0]["Dimensions"][0]
    assert set(dimensions) == {"service", "Environment", "ToolName"}
    assert record["ToolName"] == "analyze_dataset" and record["Environment"] == "dev"
    assert (record["ToolInvocation"], record["ToolSuccess"], record["ToolError"]) == ([2.0], [1.0], [1.0])
    assert len(record["ToolDuration"]) == 2 and min(record["ToolDuration"]) >= 0


def test_a_duplicate_delivery_on_its_last_receive_while_the_job_runs_does_not_mark_it_failed(local, monkeypatch):
    # Given a job whose first delivery is still running (its INPROGRESS record is fresh)
    from mcp_backend.tools import analyze_dataset

    event = load_event("tool_worker/redelivered-duplicate.json")
    real_analysis = analyze_dataset.analyze_dataset

    def killed(*args, **kwargs):
        raise SimulatedKill

    monkeypatch.setattr(analyze_dataset, "analyze_dataset", killed)
    with pytest.raises(SimulatedKill):
        local.invoke(WORKER, event)
    monkeypatch.setattr(analyze_dataset, "analyze_dataset", real_analysis)

    # When a duplicate of it arrives on what SQS counts as its last receive
    event["Records"][0]["attributes"]["ApproximateReceiveCount"] = "3"
    response = local.invoke(WORKER, event)

    # Then the duplicate fails (it goes to the DLQ) but the job is not marked FAILED: it is still running
    assert response == {"batchItemFailures": [{"itemIdentifier": event["Records"][0]["messageId"]}]}
    item = job_item(local, "job-0001-fixture")
    assert item["status"] == "RUNNING"
    assert "failedMessageId" not in item
