"""The durable worker's jobs through the testing SDK's local runner (in-process, in-memory checkpoints), on the
template's JobTable, dataset and result buckets on moto."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import anyio
import boto3
import pytest
import time_machine
from aws_durable_execution_sdk_python import durable_execution
from aws_durable_execution_sdk_python.constants import CHECKPOINT_SIZE_LIMIT_BYTES
from aws_durable_execution_sdk_python.execution import InvocationStatus
from aws_durable_execution_sdk_python.lambda_service import OperationStatus
from aws_durable_execution_sdk_python_testing.execution import ExecutionStatus
from aws_durable_execution_sdk_python_testing.runner import DurableFunctionTestRunner
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from devstack.runtime.durable_functions import DurableLambdaClient, LocalDurableFunctions
from devstack.runtime.in_process import LocalLambdaContext
from devstack.wired_stack import DATASET_BUCKET, dataset_prefix, local_dataset_url
from mcp_backend.api_keys import Principal
from mcp_backend.aws import AwsClients
from mcp_backend.config import DurableWorkerSettings, WorkerSettings, load_settings
from mcp_backend.jobs.durable import DurableJobs, DurableLimits
from mcp_backend.jobs.handoff import DurableStarts
from mcp_backend.jobs.models import JobMessage
from mcp_backend.jobs.results import ResultObjects
from mcp_backend.jobs.service import JobQueues, JobsService, JobSubmission
from mcp_backend.jobs.store import JobStore
from mcp_backend.jobs.worker import JobWorker
from mcp_backend.mcp.auth import CALLER
from mcp_backend.mcp.tasks import JobTasks
from mcp_backend.mcp.tasks_2025 import LegacyJobTasks
from mcp_backend.quotas import JobQuota
from mcp_backend.tools import dataset_chunks, fetch
from mcp_backend.tools.analyze_dataset import AnalyzeInput, analyze_dataset
from mcp_backend.tools.dataset_stream import FetchPolicy
from mcp_backend.tools.services import ToolServices
from mcp_backend.tools.submissions import JobSubmissions
from mcp_backend.tools.table import TOOLS

USER = "user-alice"


def worker_settings(local) -> DurableWorkerSettings:
    # The durable worker reads what the queued worker reads: JobTable, the dataset and result buckets.
    return load_settings(DurableWorkerSettings, local.stack.function("ToolWorker").environment)


def durable_jobs(local, tools: Any = TOOLS, timeout_seconds: int = 86400, clock: Any = None) -> DurableJobs:
    settings = worker_settings(local)
    extra = {"clock": clock} if clock is not None else {}
    return DurableJobs(
        JobStore(settings.job_table_name),
        tools,
        ToolServices.from_settings(settings, AwsClients()),
        DurableLimits(execution_timeout_seconds=timeout_seconds, result_max_bytes=settings.job_result_max_bytes),
        results=ResultObjects(settings.job_result_bucket_name),
        **extra,
    )


@pytest.fixture
def small_chunks(monkeypatch) -> None:
    # The sample datasets are about 150 bytes: 60-byte chunks (longer than any line) cut them into several, mid-line.
    monkeypatch.setattr(dataset_chunks, "DURABLE_CHUNK_BYTES", 60)


@pytest.fixture
def runner_for() -> Iterator[Any]:
    runners: list[DurableFunctionTestRunner] = []

    def make(jobs: DurableJobs, around: Callable[[Any], Any] | None = None) -> DurableFunctionTestRunner:
        handler = durable_execution(jobs.run)
        runner = DurableFunctionTestRunner(handler=around(handler) if around else handler)
        runners.append(runner)
        return runner

    yield make
    for runner in runners:
        runner.close()


def submitted(local, job_id: str, url: str) -> JobMessage:
    job = JobMessage(job_id=job_id, user_id=USER, tool="analyze_dataset", input={"dataset_url": url})
    JobStore(local.table_name("JobTable")).create_pending(job, active=True)
    return job


def run(runner: DurableFunctionTestRunner, job: JobMessage):
    return runner.run(input=job.body(), execution_name=job.job_id, execution_timeout=120)


def job_item(local, job_id: str) -> dict:
    item = JobStore(local.table_name("JobTable")).get(job_id)
    assert item is not None
    return item


def direct_analysis(url: str) -> dict[str, Any]:
    policy = FetchPolicy(dataset_bucket=DATASET_BUCKET)
    return analyze_dataset(AnalyzeInput(dataset_url=url), policy=policy, s3_client=boto3.client("s3"))


def same_analysis(durable: dict[str, Any], direct: dict[str, Any]) -> None:
    """Equal but for float rounding of the means (a mean merged from chunks adds in another order)."""
    assert {key: value for key, value in durable.items() if key != "columns"} == {
        key: value for key, value in direct.items() if key != "columns"
    }
    assert len(durable["columns"]) == len(direct["columns"])
    for got, expected in zip(durable["columns"], direct["columns"], strict=True):
        assert {k: v for k, v in got.items() if k != "mean"} == {k: v for k, v in expected.items() if k != "mean"}
        assert (got["mean"] is None) == (expected["mean"] is None)
        if got["mean"] is not None:
            assert math.isclose(got["mean"], expected["mean"], rel_tol=1e-12)


# A CSV whose quoted fields hold line breaks and commas: records cross the 60-byte chunks' ends mid-field.
QUOTED_CSV = "name,note,score\n" + "".join(
    f'row{n},"line one of {n}\nline two, with a comma",{n * 0.5}\n' for n in range(12)
)


@pytest.mark.parametrize("name", ["sales.csv", "orders.jsonl", "quoted.csv"])
def test_a_durable_analysis_reads_its_dataset_in_chunks_and_answers_as_the_direct_analysis(
    local, small_chunks, runner_for, name
):
    # Given a submitted analysis of a dataset, read by the durable worker in 60-byte chunks
    if name == "quoted.csv":
        key = f"{dataset_prefix(USER)}{name}"
        boto3.client("s3").put_object(Bucket=DATASET_BUCKET, Key=key, Body=QUOTED_CSV.encode())
    url = local_dataset_url(USER, name)
    job = submitted(local, f"durable-{name.replace('.', '-')}", url)
    runner = runner_for(durable_jobs(local))

    # When its durable execution runs to its end
    outcome = run(runner, job)

    # Then each chunk was a checkpointed step, the job SUCCEEDED with the direct analysis's answer, its progress
    # reached 1, and its concurrent-job slot was given back
    assert outcome.status is InvocationStatus.SUCCEEDED
    steps = [operation.name for operation in outcome.operations]
    chunks = [name for name in steps if name and name.startswith("chunk-")]
    assert steps[:2] == ["start", "plan"] and steps[-1] == "result"
    assert len(chunks) >= 3, steps
    item = job_item(local, job.job_id)
    assert item["status"] == "SUCCEEDED"
    same_analysis(item["result"], direct_analysis(url))
    assert float(item["progress"]) == 1.0
    assert "activeUserId" not in item
    assert item["durableExecutionArn"]
    assert json.loads(outcome.result) == {"jobId": job.job_id, "status": "SUCCEEDED"}


class SimulatedKill(BaseException):
    """Not an Exception: like a timeout or OOM kill, nothing in the handler gets to clean up or checkpoint."""


def killed_invocations_fail(handler: Any) -> Any:
    """The invocation as Lambda reports a killed one to the durable service: failed, so it is invoked again."""

    def invoke(event: Any, context: Any) -> Any:
        try:
            return handler(event, context)
        except SimulatedKill:
            raise RuntimeError("the invocation's execution environment was killed") from None

    return invoke


class ChunkRuns(Counter):
    """How often each chunk (by its byte offset) was read and counted; the first run of the chunk at position
    `kill_at` among the chunks is killed."""

    kill_at = -1


@pytest.fixture
def chunk_runs(monkeypatch) -> ChunkRuns:
    runs = ChunkRuns()
    original = dataset_chunks.DatasetChunks.chunk

    def counted(self, arguments, plan, cursor, context):
        runs[cursor["offset"]] += 1
        if len(runs) - 1 == runs.kill_at and runs[cursor["offset"]] == 1:
            raise SimulatedKill
        return original(self, arguments, plan, cursor, context)

    monkeypatch.setattr(dataset_chunks.DatasetChunks, "chunk", counted)
    return runs


def test_a_worker_killed_mid_job_resumes_without_repeating_finished_chunks_and_answers_the_same(
    local, small_chunks, runner_for, chunk_runs
):
    # Given the same analysis twice: one run uninterrupted, one whose invocation is killed while it reads its
    # third chunk (the first two checkpointed)
    url = local_dataset_url(USER, "sales.csv")
    steady = run(runner_for(durable_jobs(local)), submitted(local, "steady-run-1", url))
    steady_runs = dict(chunk_runs)
    chunk_runs.clear()
    chunk_runs.kill_at = 2
    crashed_job = submitted(local, "killed-run-1", url)

    # When the killed run's execution is invoked again and replays its checkpoints
    crashed = run(runner_for(durable_jobs(local), around=killed_invocations_fail), crashed_job)

    # Then both succeeded with the same answer; the killed run read each finished chunk once and only the chunk it
    # was killed in twice, and its job was started once
    assert (steady.status, crashed.status) == (InvocationStatus.SUCCEEDED, InvocationStatus.SUCCEEDED)
    killed_offset = sorted(steady_runs)[2]
    assert dict(chunk_runs) == {offset: 2 if offset == killed_offset else 1 for offset in steady_runs}
    assert set(steady_runs.values()) == {1}
    crashed_item, steady_item = job_item(local, "killed-run-1"), job_item(local, "steady-run-1")
    assert crashed_item["status"] == "SUCCEEDED"
    assert crashed_item["result"] == steady_item["result"]
    assert crashed_item["runs"] == 1


def long_dataset(local, rows: int = 60) -> str:
    """A CSV of `rows` rows under the user's prefix (a few kilobytes: many 60-byte chunks)."""
    lines = ["id,region,amount"] + [f"{n},{'north' if n % 3 else 'south'},{n * 1.5}" for n in range(rows)]
    key = f"{dataset_prefix(USER)}long.csv"
    boto3.client("s3").put_object(Bucket=DATASET_BUCKET, Key=key, Body="\n".join(lines).encode())
    return f"s3://{DATASET_BUCKET}/{key}"


class SlowS3:
    """S3 whose every ranged read takes `seconds` of the (travelled) clock: a dataset that takes hours to read."""

    def __init__(self, real: Any, traveller: Any, seconds: float) -> None:
        self.real, self.traveller, self.seconds = real, traveller, seconds

    def get_object(self, **request: Any) -> Any:
        self.traveller.shift(self.seconds)
        return self.real.get_object(**request)


def test_a_job_of_more_than_an_hour_completes_in_the_durable_worker(local, small_chunks, runner_for, monkeypatch):
    # Given a dataset whose every 60-byte chunk takes five minutes to read: more than an hour in all, four times
    # the queued worker's 900 s limit
    url = long_dataset(local)
    job = submitted(local, "hour-long-1", url)
    with time_machine.travel(dt.datetime.now(dt.UTC), tick=True) as traveller:
        monkeypatch.setattr(fetch, "_default_s3_client", lambda policy: SlowS3(boto3.client("s3"), traveller, 300))

        # When its durable execution runs
        outcome = run(runner_for(durable_jobs(local)), job)

    # Then it succeeded after more than an hour of its clock, with every row counted
    assert outcome.status is InvocationStatus.SUCCEEDED
    item = job_item(local, job.job_id)
    took = dt.datetime.fromisoformat(item["completedAt"]) - dt.datetime.fromisoformat(item["createdAt"])
    assert took > dt.timedelta(hours=1)
    assert (item["status"], item["result"]["rowCount"]) == ("SUCCEEDED", 60)


def test_a_job_that_reaches_the_durable_timeout_fails_naming_the_limit(local, small_chunks, runner_for, monkeypatch):
    # Given the same slow dataset and a durable execution timeout of half an hour
    url = long_dataset(local)
    job = submitted(local, "past-timeout-1", url)
    with time_machine.travel(dt.datetime.now(dt.UTC), tick=True) as traveller:
        monkeypatch.setattr(fetch, "_default_s3_client", lambda policy: SlowS3(boto3.client("s3"), traveller, 300))

        # When its durable execution runs
        outcome = run(runner_for(durable_jobs(local, timeout_seconds=1800)), job)

    # Then the job is FAILED with a reason naming the limit and its parameter, its slot freed; no result is kept
    assert outcome.status is InvocationStatus.SUCCEEDED  # the execution ended; its job failed
    item = job_item(local, job.job_id)
    assert item["status"] == "FAILED"
    assert item["error"]["type"] == "DurableTimeLimit"
    assert "1800 s execution timeout (DurableExecutionTimeoutSeconds)" in item["error"]["message"]
    assert "result" not in item and "activeUserId" not in item


def test_a_chunk_whose_checkpoint_passes_the_size_limit_is_refused_at_its_step(local, runner_for, monkeypatch):
    # Given one chunk of 30,000 distinct long values, with no per-chunk bound on the digests kept: its partial is
    # larger than one checkpoint holds
    monkeypatch.setattr(dataset_chunks, "DURABLE_CHUNK_BYTES", 4 * 1024 * 1024)
    monkeypatch.setattr(dataset_chunks, "DURABLE_DISTINCT_ENTRIES", 1_000_000)
    monkeypatch.setattr("mcp_backend.tools.analyze_dataset.DISTINCT_COUNT_BOUND", 1_000_000)
    key = f"{dataset_prefix(USER)}wide.csv"
    body = "value\n" + "".join(f"value-{n:08d}-{'x' * 20}\n" for n in range(30_000))
    boto3.client("s3").put_object(Bucket=DATASET_BUCKET, Key=key, Body=body.encode())
    job = submitted(local, "too-large-1", f"s3://{DATASET_BUCKET}/{key}")

    # When its durable execution runs
    outcome = run(runner_for(durable_jobs(local)), job)

    # Then the chunk's step failed with the reason (never checkpointed in part), and the job is FAILED with it
    assert outcome.get_step("chunk-0").status is OperationStatus.FAILED
    item = job_item(local, job.job_id)
    assert (item["status"], item["error"]["type"]) == ("FAILED", "CheckpointTooLarge")
    assert f"over the {CHECKPOINT_SIZE_LIMIT_BYTES}-byte limit of one durable checkpoint" in item["error"]["message"]


DURABLE_ARN = "arn:aws:lambda:us-east-1:123456789012:function:mcp-backend-local-DurableToolWorker:live"


class FrontDoor:
    """The one submission path with the durable worker on: the jobs service submits to JobQueue, ToolWorker takes
    the message and hands a large job to DurableToolWorker, run by the local stack's durable runner."""

    def __init__(self, local, min_bytes: int, tools: Any = TOOLS, max_bytes: int = 50 * 1024 * 1024) -> None:
        self.functions = LocalDurableFunctions(
            {"DurableToolWorker": durable_execution(durable_jobs(local).run)}, resolve=self._resolve
        )
        self.lambda_client = CountingLambda(DurableLambdaClient(self.functions))
        clients = AwsClients(lambda service: self.lambda_client if service == "lambda" else boto3.client(service))
        queues = JobQueues(
            job_table_name=local.table_name("JobTable"),
            job_queue_url=local.queue_url("JobQueue"),
            job_dead_letter_queue_url=local.queue_url("JobDeadLetterQueue"),
            result_bucket_name=local.table_name("JobResultBucket"),
            durable_worker_arn=DURABLE_ARN,
        )
        self.jobs = JobsService(queues, clients)
        environment = {
            **local.stack.function("ToolWorker").environment,
            "DURABLE_WORKER_ARN": DURABLE_ARN,
            "DURABLE_JOB_MIN_BYTES": str(min_bytes),
            "DATASET_MAX_BYTES": str(max_bytes),
        }
        settings = load_settings(WorkerSettings, environment)
        self.worker = JobWorker(
            settings,
            JobStore(settings.job_table_name),
            tools,
            ToolServices.from_settings(settings, AwsClients()),
            durable=DurableStarts.from_settings(settings, self.lambda_client),
        )
        self.queue_url = queues.job_queue_url

    @staticmethod
    def _resolve(name: str) -> str:
        if "DurableToolWorker" not in name:
            raise LookupError(name)
        return "DurableToolWorker"

    def submit(self, url: str) -> str:
        submission = JobSubmission(tool="analyze_dataset", input={"dataset_url": url})
        return self.jobs.submit(USER, submission, JobQuota("free", concurrent_jobs=2, daily_jobs=10))["jobId"]

    def receive(self) -> SQSRecord:
        """The queued message as ToolWorker's event holds it (received, not deleted: SQS may deliver it again)."""
        [message] = boto3.client("sqs").receive_message(QueueUrl=self.queue_url, AttributeNames=["All"])["Messages"]
        return SQSRecord(sqs_record(message))

    def deliver(self, seconds_left: int = 900) -> dict[str, Any]:
        self.worker.start_invocation(LocalLambdaContext("ToolWorker", "arn", 512, timeout_seconds=seconds_left))
        return self.worker.process(self.receive())


class CountingLambda:
    def __init__(self, real: DurableLambdaClient) -> None:
        self.real, self.exceptions, self.starts = real, real.exceptions, 0

    def invoke(self, **request: Any) -> dict[str, Any]:
        self.starts += 1
        return self.real.invoke(**request)

    def stop_durable_execution(self, **request: Any) -> dict[str, Any]:
        return self.real.stop_durable_execution(**request)

    def send_durable_execution_callback_success(self, **request: Any) -> dict[str, Any]:
        return self.real.send_durable_execution_callback_success(**request)


def sqs_record(message: dict[str, Any]) -> dict[str, Any]:
    return {
        "messageId": message["MessageId"],
        "receiptHandle": message["ReceiptHandle"],
        "body": message["Body"],
        "attributes": {"ApproximateReceiveCount": "1", **message.get("Attributes", {})},
        "messageAttributes": {},
        "eventSource": "aws:sqs",
    }


@pytest.fixture
def front_door(local) -> Iterator[Any]:
    doors: list[FrontDoor] = []

    def make(min_bytes: int, tools: Any = TOOLS, max_bytes: int = 50 * 1024 * 1024) -> FrontDoor:
        doors.append(FrontDoor(local, min_bytes, tools, max_bytes))
        return doors[-1]

    yield make
    for door in doors:
        door.functions.close()


def test_a_large_job_goes_durable_through_the_one_submission_path_and_reads_as_every_job(
    local, small_chunks, front_door
):
    # Given the durable worker on, for datasets of 100 bytes or more, and a submitted analysis of sales.csv (131)
    door = front_door(min_bytes=100)
    job_id = door.submit(local_dataset_url(USER, "sales.csv"))

    # When ToolWorker receives its message twice (a redelivery), and the durable execution runs to its end
    record = door.receive()
    handed = [door.worker.process(record), door.worker.process(record)]
    item = job_item(local, job_id)
    execution = door.functions.result(item["durableExecutionArn"])

    # Then one execution named by the job id was started and the record succeeded each time; get_job and both
    # Tasks eras read the job as any other: SUCCEEDED with its result, its progress complete, its slot freed
    assert handed == [{"jobId": job_id, "status": "PENDING", "durable": True}] * 2
    assert door.lambda_client.starts == 1
    assert execution.status is InvocationStatus.SUCCEEDED
    view = door.jobs.page(USER, job_id)
    assert (view["status"], view["result"]["rowCount"], view["progress"]) == ("SUCCEEDED", 6, 1.0)
    tasks = JobTasks(JobSubmissions(TOOLS, ToolServices(fetch_policy=FetchPolicy(), jobs=door.jobs)))
    assert tasks.task(Principal(user_id=USER), job_id)["status"] == "completed"
    legacy = LegacyJobTasks(tasks, result_wait_seconds=0)
    token = CALLER.set(Principal(user_id=USER))
    try:
        answer = anyio.run(legacy.get, SimpleNamespace(request=None), SimpleNamespace(task_id=job_id))
    finally:
        CALLER.reset(token)
    assert answer["status"] == "completed"
    assert "activeUserId" not in job_item(local, job_id)


def test_a_job_below_the_size_runs_in_the_queued_worker(local, front_door):
    # Given the durable worker on for datasets of 1 MiB or more, and a submitted analysis of sales.csv
    door = front_door(min_bytes=1024 * 1024)
    job_id = door.submit(local_dataset_url(USER, "sales.csv"))

    # When ToolWorker receives its message
    outcome = door.deliver()

    # Then it ran there: no durable execution, the job SUCCEEDED with no execution recorded
    assert outcome == {"jobId": job_id, "status": "SUCCEEDED"}
    assert door.lambda_client.starts == 0
    item = job_item(local, job_id)
    assert item["status"] == "SUCCEEDED" and "durableExecutionArn" not in item


def test_cancel_stops_the_durable_execution_and_frees_the_slot(local, small_chunks, front_door, monkeypatch):
    # Given a durable job held inside its second chunk
    inside, release = threading.Event(), threading.Event()
    original = dataset_chunks.DatasetChunks.chunk
    offsets: list[int] = []

    def held(self, arguments, plan, cursor, context):
        offsets.append(cursor["offset"])
        if len(offsets) == 2:
            inside.set()
            release.wait(30)
        return original(self, arguments, plan, cursor, context)

    monkeypatch.setattr(dataset_chunks.DatasetChunks, "chunk", held)
    door = front_door(min_bytes=100)
    job_id = door.submit(local_dataset_url(USER, "sales.csv"))
    door.deliver()
    assert inside.wait(30)
    arn = job_item(local, job_id)["durableExecutionArn"]

    running = door.jobs.page(USER, job_id)
    tasks = JobTasks(JobSubmissions(TOOLS, ToolServices(fetch_policy=FetchPolicy(), jobs=door.jobs)))
    working = tasks.task(Principal(user_id=USER), job_id)

    # When its owner cancels it, and the chunk it was in returns
    answer = door.jobs.cancel(USER, job_id)
    release.set()
    execution = door.functions.result(arn)

    # Then, while it ran, get_job and its task showed the first chunk's progress; the execution was stopped, no
    # later chunk was read, the job stays CANCELLED without a result, and its concurrent-job slot is free
    assert (running["status"], running["progressMessage"]) == ("RUNNING", working["statusMessage"].split(" ", 1)[1])
    assert 0 < running["progress"] < 1 and working["status"] == "working"
    assert working["statusMessage"].startswith("Running. chunk 1 done")
    assert answer == {"jobId": job_id, "status": "CANCELLED"}
    assert execution.execution_status is ExecutionStatus.STOPPED
    assert len(offsets) == 2
    item = job_item(local, job_id)
    assert item["status"] == "CANCELLED" and "result" not in item and "activeUserId" not in item


def waiting_for_answer(local, job_id: str) -> dict[str, Any]:
    """The job once its question is on it (its execution publishes it in a step of its own)."""
    for _ in range(300):
        item = job_item(local, job_id)
        if "awaitingInput" in item:
            return item
        threading.Event().wait(0.1)
    raise AssertionError("the job never asked its question")


@pytest.mark.parametrize("confirmed", [True, False])
def test_a_durable_job_waits_for_its_users_answer_through_the_tasks_input_flow(
    local, small_chunks, front_door, monkeypatch, confirmed
):
    # Given a durable job of a dataset large enough to be confirmed first (over 100 bytes here)
    monkeypatch.setattr(dataset_chunks, "DURABLE_CONFIRM_ABOVE_BYTES", 100)
    door = front_door(min_bytes=100)
    job_id = door.submit(local_dataset_url(USER, "sales.csv"))
    door.deliver()
    tasks = JobTasks(JobSubmissions(TOOLS, ToolServices(fetch_policy=FetchPolicy(), jobs=door.jobs)))

    # When its task is read while the execution waits, and the user answers (tasks/update: a confirmation
    # releases the job, a refusal cancels it)
    item = waiting_for_answer(local, job_id)
    asked = tasks.task(Principal(user_id=USER), job_id)
    if confirmed:
        assert door.jobs.release(USER, job_id)
    else:
        door.jobs.cancel(USER, job_id)
    execution = door.functions.result(item["durableExecutionArn"])

    # Then the task asked the question (input_required, the size named) with no chunk read yet; a confirmed
    # job then ran to SUCCEEDED, a refused one stopped CANCELLED without a result
    assert asked["status"] == "input_required"
    assert "chunks? A run this large takes hours." in json.dumps(asked["inputRequests"])
    assert item["status"] == "RUNNING" and "progress" not in item
    final = job_item(local, job_id)
    if confirmed:
        assert execution.status is InvocationStatus.SUCCEEDED
        assert (final["status"], final["result"]["rowCount"]) == ("SUCCEEDED", 6)
        assert "awaitingInput" not in final
    else:
        assert execution.execution_status is ExecutionStatus.STOPPED
        assert final["status"] == "CANCELLED" and "result" not in final


def test_a_queued_job_at_the_end_of_the_workers_time_fails_naming_the_limit(local, front_door):
    # Given a job that runs in the queued worker (below the durable size), received with 3 s of the invocation left
    door = front_door(min_bytes=1024 * 1024)
    job_id = door.submit(local_dataset_url(USER, "sales.csv"))

    # When ToolWorker runs it
    outcome = door.deliver(seconds_left=3)

    # Then it stopped at its first checkpoint: FAILED with a reason naming the timeout and what runs longer jobs,
    # its slot freed
    assert outcome == {"jobId": job_id, "status": "FAILED"}
    item = job_item(local, job_id)
    assert (item["status"], item["error"]["type"]) == ("FAILED", "WorkerTimeLimit")
    assert "timeout (WorkerTimeout; Lambda's limit is 900 s)" in item["error"]["message"]
    assert "DurableWorker" in item["error"]["message"] and "activeUserId" not in item


def test_a_question_left_unanswered_fails_the_job_before_the_execution_times_out(local, runner_for, monkeypatch):
    # Given a durable job that asks first, under a 2 s execution timeout (so its question waits at most 1 s)
    monkeypatch.setattr(dataset_chunks, "DURABLE_CONFIRM_ABOVE_BYTES", 100)
    job = submitted(local, "unanswered-1", local_dataset_url(USER, "sales.csv"))

    # When nobody answers
    outcome = run(runner_for(durable_jobs(local, timeout_seconds=2)), job)

    # Then the job is FAILED with the reason, no chunk was read, and its slot is free
    item = job_item(local, job.job_id)
    assert (item["status"], item["error"]["type"]) == ("FAILED", "InputNotGiven")
    assert item["error"]["message"] == "the question was not answered within 1 s"
    assert not [step for step in outcome.operations if (step.name or "").startswith("chunk-")]
    assert "activeUserId" not in item


def test_a_job_of_a_tool_declared_long_goes_durable_whatever_its_size(local, front_door):
    # Given analyze_dataset declared long, the durable worker on for datasets of 1 MiB or more, and a submitted
    # analysis of sales.csv (131 bytes)
    long_tools = {**TOOLS, "analyze_dataset": dataclasses.replace(TOOLS["analyze_dataset"], long_running=True)}
    door = front_door(min_bytes=1024 * 1024, tools=long_tools)
    job_id = door.submit(local_dataset_url(USER, "sales.csv"))

    # When ToolWorker receives its message and the execution runs
    handed = door.deliver()
    execution = door.functions.result(job_item(local, job_id)["durableExecutionArn"])

    # Then it ran in the durable worker, to SUCCEEDED
    assert handed == {"jobId": job_id, "status": "PENDING", "durable": True}
    assert execution.status is InvocationStatus.SUCCEEDED
    assert job_item(local, job_id)["status"] == "SUCCEEDED"


def test_an_unexpected_error_is_tried_again_then_fails_the_job_without_its_text(local, runner_for, monkeypatch):
    # Given a chunk step that fails every time with an error whose text must not reach the job
    tries: list[int] = []

    def broken(self, arguments, plan, cursor, context):
        tries.append(1)
        raise RuntimeError("token=do-not-store-me")

    monkeypatch.setattr(dataset_chunks.DatasetChunks, "chunk", broken)
    job = submitted(local, "unexpected-1", local_dataset_url(USER, "sales.csv"))

    # When its durable execution runs
    run(runner_for(durable_jobs(local)), job)

    # Then the step was tried three times, and the job is FAILED with a reason that carries no payload
    item = job_item(local, job.job_id)
    assert len(tries) == 3
    assert (item["status"], item["error"]["type"]) == ("FAILED", "UnexpectedStepFailure")
    assert "do-not-store-me" not in json.dumps(item, default=str)


def test_an_answer_lambda_refuses_is_not_an_error_of_the_request(local, front_door):
    # Given a running durable job whose question's callback Lambda no longer knows (it timed out)
    door = front_door(min_bytes=100)
    job = JobMessage(job_id="stale-answer-1", user_id=USER, tool="analyze_dataset", input={"dataset_url": "s3://b/k"})
    store = JobStore(local.table_name("JobTable"))
    store.create_pending(job, active=True)
    store.start_durable(job, "arn:execution")
    store.await_answer(job, "Go on?", "Y2FsbGJhY2stZ29uZQ==")

    # When its user confirms (tasks/update)
    released = door.jobs.release(USER, job.job_id)

    # Then the request answers that nothing was released, and the question is gone from the job
    assert released is False
    assert "awaitingInput" not in job_item(local, job.job_id)


def test_a_dataset_past_the_queued_workers_size_cap_goes_durable(local, small_chunks, front_door):
    # Given the durable worker on for datasets of 1 MiB or more, ToolWorker refusing datasets over 100 bytes, and a
    # submitted analysis of sales.csv (131 bytes)
    door = front_door(min_bytes=1024 * 1024, max_bytes=100)
    job_id = door.submit(local_dataset_url(USER, "sales.csv"))

    # When ToolWorker receives its message and the execution runs
    handed = door.deliver()
    execution = door.functions.result(job_item(local, job_id)["durableExecutionArn"])

    # Then it ran in the durable worker (which reads in chunks, past that cap), to SUCCEEDED
    assert handed == {"jobId": job_id, "status": "PENDING", "durable": True}
    assert execution.status is InvocationStatus.SUCCEEDED
    assert job_item(local, job_id)["result"]["rowCount"] == 6


def test_an_empty_csv_fails_as_the_direct_analysis_says(local, runner_for):
    # Given a submitted analysis of an empty CSV object
    key = f"{dataset_prefix(USER)}empty.csv"
    boto3.client("s3").put_object(Bucket=DATASET_BUCKET, Key=key, Body=b"")
    job = submitted(local, "empty-csv-1", f"s3://{DATASET_BUCKET}/{key}")

    # When its durable execution runs
    run(runner_for(durable_jobs(local)), job)

    # Then the job is FAILED with the reason analyze_dataset gives for it
    item = job_item(local, job.job_id)
    assert (item["status"], item["error"]["type"]) == ("FAILED", "DatasetUnparseable")
    assert item["error"]["message"] == "CSV dataset is empty: it has no header row"
