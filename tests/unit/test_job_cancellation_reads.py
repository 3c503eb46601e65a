"""How often a running job's cancellation checkpoints read JobTable: at most once per interval of the run,
the claim counting as the first look, and a run cancelled between reads is still never completed (the end's
write refuses it). The worker and JobTable are the template's, on moto."""

from __future__ import annotations

import json
import uuid
from typing import Any

import boto3
import pytest
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from devstack.runtime.in_process import LocalLambdaContext
from mcp_backend.aws import AwsClients
from mcp_backend.config import WorkerSettings, load_settings
from mcp_backend.jobs.models import JobStatus
from mcp_backend.jobs.store import JobStore
from mcp_backend.jobs.worker import CANCELLATION_READ_INTERVAL_SECONDS, CancellationReads, JobWorker
from mcp_backend.tools import analyze_dataset
from mcp_backend.tools.services import ToolServices
from mcp_backend.tools.table import TOOLS

USER = "user-alice"
DATASET = "s3://local-datasets/user-alice/sales.csv"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0  # a monotonic clock: no date, so nothing to compare with the wall clock

    def __call__(self) -> float:
        return self.now


class StatusReads:
    """The job's status as the read answers it, counting the reads."""

    def __init__(self) -> None:
        self.reads = 0
        self.cancelled = False

    def __call__(self) -> bool:
        self.reads += 1
        return self.cancelled


def test_checkpoints_read_at_most_once_per_interval_and_a_cancellation_once_read_holds():
    # Given a run just claimed, and its checks
    clock, status = Clock(), StatusReads()
    cancelled = CancellationReads(status, interval=1.0, clock=clock)

    # When its tool checkpoints often within the first interval
    within = [cancelled() for _ in range(50)]
    # and again past it, twice in the same interval
    clock.now += 1.0
    first_past, second_past = cancelled(), cancelled()

    # Then nothing was read within the first interval, and past it one read answered both checks
    assert not any(within) and not first_past and not second_past
    assert status.reads == 1

    # When the owner cancels and the next interval passes
    status.cancelled = True
    clock.now += 1.0
    # Then the next check reads it, and every later one answers cancelled without reading again
    assert cancelled() and cancelled()
    clock.now += 10.0
    assert cancelled()
    assert status.reads == 2


@pytest.fixture
def recorded_operations(local) -> tuple[JobStore, list[str]]:
    """JobTable through a client that records every DynamoDB operation asked of it."""
    client = boto3.client("dynamodb")
    operations: list[str] = []
    client.meta.events.register("before-call.dynamodb.*", lambda model, **_: operations.append(model.name))
    return JobStore(local.table_name("JobTable"), client), operations


def worker_for(local, store: JobStore, clock: Clock) -> JobWorker:
    # The tool runs in the record's thread, not a child process: the reads it makes are counted in this process.
    environment = {**local.stack.function("ToolWorker").environment, "TOOL_RUNS_APART": "false"}
    settings = load_settings(WorkerSettings, environment)
    worker = JobWorker(settings, store, TOOLS, ToolServices.from_settings(settings, AwsClients()), clock=clock)
    spec = local.stack.function("ToolWorker")
    worker.start_invocation(LocalLambdaContext(spec.name, spec.arn, spec.memory_size, spec.timeout))
    return worker


def job_record(job_id: str) -> SQSRecord:
    body = {"jobId": job_id, "userId": USER, "tool": "analyze_dataset", "input": {"dataset_url": DATASET}}
    message_id = str(uuid.uuid4())
    return SQSRecord(
        {
            "messageId": message_id,
            "receiptHandle": message_id,
            "body": json.dumps(body),
            "attributes": {"ApproximateReceiveCount": "1"},
            "messageAttributes": {"jobType": {"stringValue": "analyze_dataset", "dataType": "String"}},
            "eventSource": "aws:sqs",
        }
    )


def test_a_job_that_runs_within_the_read_interval_writes_its_claim_and_end_and_reads_nothing(
    local, recorded_operations
):
    # Given the worker, its JobTable client recording every operation, and a clock that stays within the
    # first read interval of the run
    store, operations = recorded_operations
    worker = worker_for(local, store, Clock())

    # When it runs an analysis job (whose tool checkpoints as it starts and as it ends)
    outcome = worker.process(job_record("job-cancel-read-0001"))

    # Then JobTable saw the claim and the end, and no status read
    assert outcome == {"jobId": "job-cancel-read-0001", "status": "SUCCEEDED"}
    assert operations == ["UpdateItem", "UpdateItem"]
    assert store.get("job-cancel-read-0001")["status"] == JobStatus.SUCCEEDED


def test_a_job_cancelled_while_it_runs_between_reads_is_never_completed(local, recorded_operations, monkeypatch):
    # Given an analysis that its owner cancels while it runs, within the run's first read interval
    store, _ = recorded_operations
    clock = Clock()
    worker = worker_for(local, store, clock)
    real_analysis = analyze_dataset.analyze_dataset

    def cancelled_meanwhile(*args: Any, **kwargs: Any) -> dict[str, Any]:
        assert store.mark_cancelled("job-cancel-read-0002", USER)
        return real_analysis(*args, **kwargs)

    monkeypatch.setattr(analyze_dataset, "analyze_dataset", cancelled_meanwhile)

    # When the worker runs it
    outcome = worker.process(job_record("job-cancel-read-0002"))

    # Then the end's write refused the result: the record succeeds (its message is deleted), the job stays
    # CANCELLED with no result
    assert outcome == {"jobId": "job-cancel-read-0002", "status": "CANCELLED"}
    item = store.get("job-cancel-read-0002")
    assert item["status"] == JobStatus.CANCELLED
    assert "result" not in item and "resultKey" not in item


def test_a_long_run_reads_once_an_interval_has_passed_and_stops_when_cancelled(local, recorded_operations, monkeypatch):
    # Given an analysis whose run lasts past the read interval before its next checkpoint, cancelled meanwhile
    store, operations = recorded_operations
    clock = Clock()
    worker = worker_for(local, store, clock)
    real_analysis = analyze_dataset.analyze_dataset

    def slow_and_cancelled(request: Any, *, policy: Any, progress: Any, **kwargs: Any) -> dict[str, Any]:
        assert store.mark_cancelled("job-cancel-read-0003", USER)
        clock.now += CANCELLATION_READ_INTERVAL_SECONDS
        return real_analysis(request, policy=policy, progress=progress, **kwargs)

    monkeypatch.setattr(analyze_dataset, "analyze_dataset", slow_and_cancelled)

    # When the worker runs it
    outcome = worker.process(job_record("job-cancel-read-0003"))

    # Then the tool's first checkpoint read the status and stopped the run before the end's write
    assert outcome == {"jobId": "job-cancel-read-0003", "status": "CANCELLED"}
    assert operations.count("GetItem") == 1
    assert store.get("job-cancel-read-0003")["status"] == JobStatus.CANCELLED
