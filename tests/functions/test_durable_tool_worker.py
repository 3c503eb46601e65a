"""The durable worker's jobs through the testing SDK's local runner (in-process, in-memory checkpoints), on the
template's JobTable, dataset and result buckets on moto."""

from __future__ import annotations

import datetime as dt
import json
import math
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest
import time_machine
from aws_durable_execution_sdk_python import durable_execution
from aws_durable_execution_sdk_python.constants import CHECKPOINT_SIZE_LIMIT_BYTES
from aws_durable_execution_sdk_python.execution import InvocationStatus
from aws_durable_execution_sdk_python.lambda_service import OperationStatus
from aws_durable_execution_sdk_python_testing.runner import DurableFunctionTestRunner

from devstack.wired_stack import DATASET_BUCKET, dataset_prefix, local_dataset_url
from mcp_backend.aws import AwsClients
from mcp_backend.config import DurableWorkerSettings, load_settings
from mcp_backend.jobs.durable import DurableJobs, DurableLimits
from mcp_backend.jobs.models import JobMessage
from mcp_backend.jobs.results import ResultObjects
from mcp_backend.jobs.store import JobStore
from mcp_backend.tools import dataset_chunks, fetch
from mcp_backend.tools.analyze_dataset import AnalyzeInput, analyze_dataset
from mcp_backend.tools.dataset_stream import FetchPolicy
from mcp_backend.tools.services import ToolServices
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


@pytest.mark.parametrize("name", ["sales.csv", "orders.jsonl"])
def test_a_durable_analysis_reads_its_dataset_in_chunks_and_answers_as_the_direct_analysis(
    local, small_chunks, runner_for, name
):
    # Given a submitted analysis of a sample dataset, read by the durable worker in 60-byte chunks
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
