"""The durable worker's jobs through the testing SDK's local runner (in-process, in-memory checkpoints), on the
template's JobTable, dataset and result buckets on moto."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from aws_durable_execution_sdk_python import durable_execution
from aws_durable_execution_sdk_python.execution import InvocationStatus
from aws_durable_execution_sdk_python_testing.runner import DurableFunctionTestRunner

from devstack.wired_stack import DATASET_BUCKET, local_dataset_url
from mcp_backend.aws import AwsClients
from mcp_backend.config import DurableWorkerSettings, load_settings
from mcp_backend.jobs.durable import DurableJobs, DurableLimits
from mcp_backend.jobs.models import JobMessage
from mcp_backend.jobs.results import ResultObjects
from mcp_backend.jobs.store import JobStore
from mcp_backend.tools import dataset_chunks
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

    def make(jobs: DurableJobs) -> DurableFunctionTestRunner:
        runner = DurableFunctionTestRunner(handler=durable_execution(jobs.run))
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
