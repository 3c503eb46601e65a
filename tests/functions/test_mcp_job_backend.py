"""submit_analyses' enqueueing against the template's JobQueue and JobTable on moto, including entries
SendMessageBatch reports in `Failed` (which it does without raising). A job is recorded once however many
requests submit it; a repeat of a job still PENDING sends its message again, and the worker runs it once."""

from __future__ import annotations

import json
import threading

import boto3
import pytest

from mcp_backend.api_keys import Principal
from mcp_backend.aws import AwsClients
from mcp_backend.config import McpSettings, load_settings
from mcp_backend.jobs.service import JobSubmission
from mcp_backend.mcp.bindings import ToolCallFailed, reported
from mcp_backend.mcp.server import tool_bindings
from mcp_backend.quotas import JobQuota

ALICE = Principal(user_id="user-alice")
# These tests are about enqueueing, not quotas (tests/functions/test_job_quotas.py): a quota no test reaches.
ROOMY = JobQuota("internal", concurrent_jobs=1000, daily_jobs=100_000)


class FlakyBatchSqs:
    """The real (moto) SQS client, except that the first SendMessageBatch call reports chosen entries as
    failed by the service, as SQS does under throttling: HTTP 200, the entries listed in `Failed`."""

    def __init__(self, fail_ids: set[str], sender_fault_ids: set[str] | frozenset[str] = frozenset()) -> None:
        self._sqs = boto3.client("sqs")
        self.fail_ids, self.sender_fault_ids = set(fail_ids), set(sender_fault_ids)
        self.calls: list[list[str]] = []

    def send_message_batch(self, QueueUrl: str, Entries: list[dict]) -> dict:
        self.calls.append([entry["Id"] for entry in Entries])
        failing = {e["Id"] for e in Entries if e["Id"] in self.fail_ids | self.sender_fault_ids}
        sent = self._sqs.send_message_batch(QueueUrl=QueueUrl, Entries=[e for e in Entries if e["Id"] not in failing])
        self.fail_ids.clear()  # the service fault is transient
        failed = [
            {"Id": entry_id, "SenderFault": entry_id in self.sender_fault_ids, "Code": "InternalError"}
            for entry_id in sorted(failing)
        ]
        return {"Successful": sent.get("Successful", []), "Failed": failed}

    def __getattr__(self, name: str):
        return getattr(self._sqs, name)


class Backend:
    """The jobs service as the MCP submit tools call it: as the caller, reported failures as tool errors."""

    def __init__(self, local, sqs) -> None:
        settings = load_settings(McpSettings, local.stack.function("McpServer").environment)
        clients = AwsClients(lambda service: sqs if service == "sqs" else boto3.client(service))
        self.jobs = tool_bindings(settings, clients).jobs

    def submit(self, principal: Principal, submission: JobSubmission) -> dict:
        return reported(self.jobs.submit, principal.user_id, submission, ROOMY)

    def submit_many(self, principal: Principal, submissions: list[JobSubmission]) -> list[dict]:
        return reported(self.jobs.submit_many, principal.user_id, submissions, ROOMY)


def backend(local, sqs) -> Backend:
    return Backend(local, sqs)


def queued(local) -> int:
    attributes = boto3.client("sqs").get_queue_attributes(
        QueueUrl=local.queue_url("JobQueue"), AttributeNames=["ApproximateNumberOfMessages"]
    )["Attributes"]
    return int(attributes["ApproximateNumberOfMessages"])


def analysis(call_id: str) -> JobSubmission:
    return JobSubmission(
        tool="analyze_dataset", input={"dataset_url": "s3://local-datasets/user-alice/sales.csv"}, call_id=call_id
    )


def another_dataset(call_id: str) -> JobSubmission:
    return JobSubmission(
        tool="analyze_dataset", input={"dataset_url": "s3://local-datasets/user-alice/other.csv"}, call_id=call_id
    )


def items(count: int) -> list[JobSubmission]:
    return [analysis(f"call-{i}") for i in range(count)]


def test_entries_reported_failed_by_the_service_are_retried_and_sent_once(local):
    # Given 12 submissions (two batches) where the first batch call reports entries 3 and 7 as failed
    sqs = FlakyBatchSqs(fail_ids={"3", "7"})

    # When they are submitted
    results = backend(local, sqs).submit_many(ALICE, items(12))

    # Then every item has a PENDING job, the two failed entries were sent again alone, and each job is queued once
    assert [r["status"] for r in results] == ["PENDING"] * 12
    assert sqs.calls[1] == ["3", "7"]
    assert queued(local) == 12


def test_a_sender_fault_is_not_retried_and_is_reported_for_that_item_only(local):
    # Given a batch where the service rejects entry 2 as malformed
    sqs = FlakyBatchSqs(fail_ids=set(), sender_fault_ids={"2"})

    # When three items are submitted
    results = backend(local, sqs).submit_many(ALICE, items(3))

    # Then only item 2 carries an error, it was not retried, and the other two are queued
    assert "error" in results[2] and "error" not in results[0] and "error" not in results[1]
    assert len(sqs.calls) == 1
    assert queued(local) == 2


def runs_of(local, job_ids) -> dict[str, tuple[str, int]]:
    """Each job's status and how often its body ran, once the worker has taken every message off JobQueue."""
    from mcp_backend.jobs.store import JobStore

    local.sqs_source_for("ToolWorker").drain()
    store = JobStore(local.table_name("JobTable"))
    return {job_id: (store.get(job_id)["status"], store.get(job_id).get("runs")) for job_id in job_ids}


def test_the_same_call_ids_again_name_the_same_jobs_and_each_runs_once(local):
    # Given three submitted items, not run yet
    sqs = FlakyBatchSqs(fail_ids=set())
    first = backend(local, sqs).submit_many(ALICE, items(3))

    # When the same callIds are submitted again
    again = backend(local, sqs).submit_many(ALICE, items(3))

    # Then the same job ids come back as repeats, each with a message of its own on the queue
    assert [r["jobId"] for r in again] == [r["jobId"] for r in first]
    assert all(r["repeated"] for r in again) and queued(local) == 6
    # And the worker runs each job once, however many of its messages it receives
    assert set(runs_of(local, [r["jobId"] for r in first]).values()) == {("SUCCEEDED", 1)}


def test_a_repeat_of_a_job_that_ran_sends_nothing_and_answers_its_state(local):
    # Given a submitted job that the worker has run
    service = backend(local, FlakyBatchSqs(fail_ids=set()))
    job_id = service.submit(ALICE, analysis("ran-call"))["jobId"]
    runs_of(local, [job_id])

    # When the same call is submitted again
    again = service.submit(ALICE, analysis("ran-call"))

    # Then it answers the job's state and queues nothing
    assert again == {"jobId": job_id, "status": "SUCCEEDED", "repeated": True}
    assert queued(local) == 0


def test_a_call_id_repeated_within_one_batch_names_one_job_for_the_same_input_and_conflicts_for_another(local):
    # Given a batch whose items 0, 1 and 2 share a callId: 1 repeats item 0's input, 2 carries another dataset
    other = another_dataset("twice")
    batch = [analysis("twice"), analysis("twice"), other]

    # When it is submitted
    results = backend(local, FlakyBatchSqs(fail_ids=set())).submit_many(ALICE, batch)

    # Then the repeat is the first item's job, the other input is a JobConflict, and one message is queued
    assert results[0]["status"] == "PENDING"
    assert results[1] == {"index": 1, "jobId": results[0]["jobId"], "status": "PENDING", "repeated": True}
    assert results[2]["index"] == 2 and results[2]["error"]["type"] == "JobConflict" and "jobId" not in results[2]
    assert queued(local) == 1


def test_a_repeat_within_a_batch_of_an_item_that_conflicted_is_the_same_conflict(local):
    # Given a job already submitted under a callId, then a batch repeating that callId twice with another input
    service = backend(local, FlakyBatchSqs(fail_ids=set()))
    service.submit(ALICE, analysis("taken"))
    other = another_dataset("taken")

    # When the batch is submitted
    results = service.submit_many(ALICE, [other, other])

    # Then both items are the conflict, neither reports a queued job
    assert [result["error"]["type"] for result in results] == ["JobConflict", "JobConflict"]
    assert queued(local) == 1


def test_a_call_id_reused_for_another_input_is_refused(local):
    # Given a submitted job
    service = backend(local, FlakyBatchSqs(fail_ids=set()))
    service.submit(ALICE, analysis("reused-call"))

    # When the same callId comes with another dataset
    other = another_dataset("reused-call")
    with pytest.raises(ToolCallFailed) as refused:
        service.submit(ALICE, other)

    # Then it is a conflict, and only the first request's message is queued
    assert str(refused.value).startswith("JobConflict") and queued(local) == 1


class DownSqs(FlakyBatchSqs):
    """SendMessage fails the way the SDK fails when the queue is unavailable."""

    def send_message(self, **request):
        from botocore.exceptions import ClientError

        raise ClientError(
            {"Error": {"Code": "ServiceUnavailable", "Message": f"queue {request['QueueUrl']}"}}, "SendMessage"
        )


def test_an_unavailable_queue_is_a_retryable_tool_error_that_names_no_resource_and_a_retry_enqueues(local):
    # Given the job queue is unavailable
    request = analysis("call-retry")

    # When a submission is made
    with pytest.raises(ToolCallFailed) as failed:
        backend(local, DownSqs(fail_ids=set())).submit(ALICE, request)

    # Then the caller is told to retry, without the queue's URL, and nothing is queued
    assert str(failed.value).startswith("EnqueueFailed")
    assert "amazonaws" not in str(failed.value) and "JobQueue" not in str(failed.value)
    assert queued(local) == 0
    # And the same callId, once the queue is back, enqueues the job exactly once
    result = backend(local, FlakyBatchSqs(fail_ids=set())).submit(ALICE, request)
    assert result["status"] == "PENDING" and queued(local) == 1


def messages_on(local, queue: str = "JobQueue") -> list[dict]:
    """Every message on the queue, read with their attributes (each receive hides what it returned)."""
    sqs, found = boto3.client("sqs"), []
    while batch := sqs.receive_message(
        QueueUrl=local.queue_url(queue),
        MaxNumberOfMessages=10,
        MessageAttributeNames=["All"],
        VisibilityTimeout=60,
        WaitTimeSeconds=0,
    ).get("Messages", []):
        found.extend(batch)
    return found


def concurrently(count: int, call) -> list:
    """`call()` from `count` threads released together; the results (or raised errors) in thread order."""
    barrier = threading.Barrier(count)
    results: list = [None] * count

    def one(slot: int) -> None:
        barrier.wait()
        try:
            results[slot] = call()
        except Exception as error:  # the test inspects it
            results[slot] = error

    threads = [threading.Thread(target=one, args=(slot,)) for slot in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def test_twenty_concurrent_identical_submissions_record_one_job_that_runs_once(local):
    # Given one service as the endpoint runs it (its threads share it) and one callId
    service = backend(local, FlakyBatchSqs(fail_ids=set()))

    # When 20 requests submit the same call at the same moment
    results = concurrently(20, lambda: service.submit(ALICE, analysis("same-call")))

    # Then every caller is answered with the one job, one of them as its submitter, and the worker runs it once
    assert all(isinstance(result, dict) for result in results), results
    assert len({result["jobId"] for result in results}) == 1
    assert sum(1 for result in results if not result.get("repeated")) == 1
    assert queued(local) >= 1
    assert runs_of(local, [results[0]["jobId"]]) == {results[0]["jobId"]: ("SUCCEEDED", 1)}


def test_twenty_concurrent_identical_batches_record_each_job_once_and_run_it_once(local):
    # Given 20 requests each submitting the same 12 items
    service = backend(local, FlakyBatchSqs(fail_ids=set()))

    # When they all submit at once
    results = concurrently(20, lambda: service.submit_many(ALICE, items(12)))

    # Then every request names the same 12 jobs, none failed, and the worker runs each of them once
    assert all(isinstance(result, list) for result in results), results
    assert {tuple(r["jobId"] for r in result) for result in results} == {tuple(r["jobId"] for r in results[0])}
    assert not [r for result in results for r in result if "error" in r]
    assert set(runs_of(local, [r["jobId"] for r in results[0]]).values()) == {("SUCCEEDED", 1)}


class KilledSqs(FlakyBatchSqs):
    """The endpoint's process dies inside SendMessage: nothing is sent and no code after it runs."""

    def send_message(self, **request):
        raise KeyboardInterrupt  # not an Exception: no handler of the service sees it, like a kill


def test_a_sender_killed_between_record_and_send_is_recovered_by_the_next_repeat(local):
    # Given a submission whose sender was killed after recording the job and before sending its message
    request = analysis("killed-call")
    killed = backend(local, KilledSqs(fail_ids=set()))
    with pytest.raises(KeyboardInterrupt):
        killed.submit(ALICE, request)
    assert queued(local) == 0

    # When the same call is retried
    retry = backend(local, FlakyBatchSqs(fail_ids=set()))
    result = retry.submit(ALICE, request)

    # Then that retry sends the job's message before it answers, and the job runs once
    assert result["status"] == "PENDING" and result["repeated"] is True
    assert [json.loads(m["Body"])["jobId"] for m in messages_on(local)] == [result["jobId"]]


def test_every_job_message_carries_its_tool_as_the_job_type_attribute(local):
    # Given one job submitted alone and three in a batch
    service = backend(local, FlakyBatchSqs(fail_ids=set()))
    service.submit(ALICE, analysis("typed-one"))
    service.submit_many(ALICE, items(3))

    # When the queue's messages are read with their attributes
    messages = messages_on(local)

    # Then each carries jobType = the tool's name as a String attribute
    assert len(messages) == 4
    assert all(
        m["MessageAttributes"] == {"jobType": {"DataType": "String", "StringValue": "analyze_dataset"}}
        for m in messages
    )
