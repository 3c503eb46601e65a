"""The worker's run-once records on the job item (JobRunRecords under Powertools idempotency), against the
template's JobTable on moto, with an injected clock: when a claim blocks a duplicate, when it expires, and that
an ended job is never run again."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from aws_lambda_powertools.utilities.idempotency.exceptions import (
    IdempotencyAlreadyInProgressError,
    IdempotencyValidationError,
)

from mcp_backend.idempotency import RunOnce
from mcp_backend.jobs.models import JobError, JobMessage, JobOutcome, JobRun, JobStatus
from mcp_backend.jobs.run_records import RUN_KEY_JMESPATH, RUN_PAYLOAD_JMESPATH, JobRunRecords
from mcp_backend.jobs.store import JobStore

TIMEOUT = 120  # the function's configured timeout, seconds
JOB = JobMessage(job_id="job-run-0001", user_id="user-alice", tool="analyze_dataset", input={"dataset_url": "s3://b/k"})


class SimulatedKill(BaseException):
    """Not an Exception: like a timeout, nothing after it runs (the claim is never given up)."""


class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


class Body:
    """The job's body: counts its runs, and does what the test tells it to."""

    def __init__(self) -> None:
        self.runs = 0
        self.then: BaseException | None = None

    def run(self, run: JobRun) -> dict[str, Any]:
        self.runs += 1
        if self.then is not None:
            raise self.then
        return JobOutcome(job_id=run.job.job_id, status=JobStatus.SUCCEEDED, result_text='{"rows":1}').model_dump()


@pytest.fixture
def store(local) -> JobStore:
    return JobStore(local.table_name("JobTable"), boto3.client("dynamodb"))


def run_once(store: JobStore, body: Body, clock: Clock) -> RunOnce:
    once = RunOnce(
        body.run,
        data_keyword_argument="run",
        key_jmespath=RUN_KEY_JMESPATH,
        validation_jmespath=RUN_PAYLOAD_JMESPATH,
        ttl_seconds=3600,
        timeout_seconds=TIMEOUT,
        persistence=lambda: JobRunRecords(store, clock=clock),
    )
    once.start_invocation(object())
    return once


def test_a_killed_runs_claim_blocks_duplicates_until_the_timeout_plus_5_s(store):
    # Given a submitted job whose first run was killed mid-way (its claim stays)
    assert store.create_pending(JOB)
    body, clock = Body(), Clock()
    once = run_once(store, body, clock)
    body.then = SimulatedKill()
    with pytest.raises(SimulatedKill):
        once(run=JobRun(job=JOB, attempt=1))
    body.then = None

    # When its message comes again 1 s before the claim expires (the function's timeout + 5 s)
    clock.now += TIMEOUT + 4
    # Then it is refused as running elsewhere, without running the body
    with pytest.raises(IdempotencyAlreadyInProgressError):
        once(run=JobRun(job=JOB, attempt=2))
    assert body.runs == 1 and store.get(JOB.job_id)["status"] == JobStatus.RUNNING

    # When it comes 1 s after the claim expired
    clock.now += 2
    outcome = once(run=JobRun(job=JOB, attempt=3))

    # Then the body runs again and the job ends SUCCEEDED with its result, its claim gone
    assert outcome["status"] == JobStatus.SUCCEEDED and body.runs == 2
    item = store.get(JOB.job_id)
    assert (item["status"], item["result"], item["runs"], item["attempts"]) == ("SUCCEEDED", {"rows": 1}, 2, 3)
    assert "runExpiresAt" not in item


def test_a_redelivery_after_success_returns_without_running(store):
    # Given a job that ran to SUCCEEDED
    assert store.create_pending(JOB)
    body, clock = Body(), Clock()
    once = run_once(store, body, clock)
    once(run=JobRun(job=JOB, attempt=1))
    before = store.get(JOB.job_id)

    # When its message is delivered again, even long after
    clock.now += 86400
    outcome = once(run=JobRun(job=JOB, attempt=2))

    # Then the body did not run again and the job is unchanged
    assert outcome == JobOutcome(job_id=JOB.job_id, status=JobStatus.SUCCEEDED).model_dump()
    assert body.runs == 1 and store.get(JOB.job_id) == before


def test_a_failed_run_gives_its_claim_up_and_the_next_receive_runs_at_once(store):
    # Given a job whose first run failed (a transient error)
    assert store.create_pending(JOB)
    body, clock = Body(), Clock()
    once = run_once(store, body, clock)
    body.then = ConnectionError("dataset unreachable")
    with pytest.raises(ConnectionError):
        once(run=JobRun(job=JOB, attempt=1))
    body.then = None

    # When the message's next receive comes at once (no expiry to wait for)
    outcome = once(run=JobRun(job=JOB, attempt=2))

    # Then the job runs and succeeds
    assert outcome["status"] == JobStatus.SUCCEEDED and body.runs == 2


@pytest.mark.parametrize("ended", [JobStatus.FAILED, JobStatus.CANCELLED])
def test_a_job_that_ended_without_success_is_never_run_by_a_stray_message(store, ended):
    # Given a job that failed for good, or that its owner cancelled
    assert store.create_pending(JOB)
    if ended is JobStatus.FAILED:
        store.mark_failed(JOB.job_id, JOB.user_id, JobError(type="DatasetNotFound", message="404"), "m-1", JOB.tool)
    else:
        assert store.mark_cancelled(JOB.job_id, JOB.user_id)
    body = Body()

    # When a message of it arrives (a duplicate of a repeated submission)
    outcome = run_once(store, body, Clock())(run=JobRun(job=JOB, attempt=1))

    # Then the body never runs and the job keeps its end
    assert outcome["status"] == ended and body.runs == 0
    assert store.get(JOB.job_id)["status"] == ended


@pytest.mark.parametrize(
    "other",
    [
        JOB.model_copy(update={"input": {"dataset_url": "s3://b/other"}}),
        JOB.model_copy(update={"tool": "another_tool"}),
        JOB.model_copy(update={"user_id": "user-mallory"}),
    ],
    ids=["input", "tool", "owner"],
)
def test_the_same_job_id_with_another_payload_is_refused_and_writes_nothing(store, other):
    # Given a submitted job, waiting for its run
    assert store.create_pending(JOB)
    before = store.get(JOB.job_id)
    body = Body()

    # When a message with its id but another input, tool or owner comes
    with pytest.raises(IdempotencyValidationError):
        run_once(store, body, Clock())(run=JobRun(job=other, attempt=1))

    # Then nothing ran and the job is as it was
    assert body.runs == 0 and store.get(JOB.job_id) == before


def test_a_run_makes_two_writes_and_no_read(local):
    # Given a submitted job and a client that records every DynamoDB operation asked of it
    client = boto3.client("dynamodb")
    operations: list[str] = []
    client.meta.events.register("before-call.dynamodb.*", lambda model, **_: operations.append(model.name))
    store = JobStore(local.table_name("JobTable"), client)
    assert store.create_pending(JOB)
    operations.clear()

    # When the worker's run-once call runs it
    run_once(store, Body(), Clock())(run=JobRun(job=JOB, attempt=1))

    # Then it made the claim and the end, nothing else, and the job is SUCCEEDED
    assert operations == ["UpdateItem", "UpdateItem"]
    assert store.get(JOB.job_id)["status"] == JobStatus.SUCCEEDED


def running_before_run_claims(store: JobStore, updated_at: float) -> None:
    """A job RUNNING as a worker that predates run claims left it: no claim expiry, its last update's time."""
    assert store.create_pending(JOB)
    boto3.client("dynamodb").update_item(
        TableName=store.table_name,
        Key={"jobId": {"S": JOB.job_id}},
        UpdateExpression="SET #status = :running, updatedAt = :at REMOVE payloadHash, runExpiresAt",
        ExpressionAttributeNames={"#status": "status"},
        ExpressionAttributeValues={
            ":running": {"S": JobStatus.RUNNING},
            ":at": {"S": datetime.fromtimestamp(updated_at, UTC).isoformat(timespec="milliseconds")},
        },
    )


def test_a_job_running_on_the_previous_worker_at_deploy_is_not_run_twice(store):
    # Given a job that a worker of the previous release started 10 s ago (its run recorded without a claim)
    body, clock = Body(), Clock()
    running_before_run_claims(store, updated_at=clock.now - 10)

    # When its message reaches the new worker while that run may still be going
    # Then it is refused as running elsewhere, without running the body
    with pytest.raises(IdempotencyAlreadyInProgressError):
        run_once(store, body, clock)(run=JobRun(job=JOB, attempt=2))
    assert body.runs == 0

    # When it comes again once the previous run must have ended (the timeout + 5 s after its last update)
    clock.now += TIMEOUT + 5 - 10 + 1
    outcome = run_once(store, body, clock)(run=JobRun(job=JOB, attempt=3))

    # Then it runs, once, and ends SUCCEEDED
    assert outcome["status"] == JobStatus.SUCCEEDED and body.runs == 1
