"""Jobs as MCP tasks, below the HTTP edge: the task a job item reads as, cancellation, and results that do not
fit a JobTable item. JobTable is the template's, on moto."""

from __future__ import annotations

import dataclasses
import io
import json
import time
from types import SimpleNamespace
from typing import Any

import anyio
import boto3
import pytest
from botocore.exceptions import ClientError
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolRequestParams

from mcp_backend.api_keys import Principal
from mcp_backend.aws import AwsClients
from mcp_backend.jobs.errors import JobAlreadyFinished, JobCancelled, JobNotFound, ResultTooLarge
from mcp_backend.jobs.models import JobMessage, JobStatus
from mcp_backend.jobs.service import JobQueues, JobsService
from mcp_backend.jobs.store import JobStore
from mcp_backend.jobs.worker import is_permanent
from mcp_backend.mcp.auth import CALLER, ScopedPrincipal
from mcp_backend.mcp.tasks import JobTasks
from mcp_backend.mcp.tasks_2025 import LegacyJobTasks
from mcp_backend.tools.context import ToolContext
from mcp_backend.tools.dataset_stream import FetchPolicy
from mcp_backend.tools.services import ToolServices
from mcp_backend.tools.submissions import JobSubmissions
from mcp_backend.tools.table import TOOLS, Access, Mode, Tool

USER, OTHER = "user-alice", "user-bob"
ALICE, BOB = Principal(user_id=USER), Principal(user_id=OTHER)


@pytest.fixture
def jobs(local) -> JobsService:
    queues = JobQueues(
        job_table_name=local.table_name("JobTable"),
        job_queue_url=local.queue_url("JobQueue"),
        job_dead_letter_queue_url=local.queue_url("JobDeadLetterQueue"),
        result_bucket_name=local.table_name("JobResultBucket"),
    )
    return JobsService(queues)


def job_tasks(jobs: JobsService, table: dict[str, Tool] = TOOLS) -> JobTasks:
    return JobTasks(JobSubmissions(table, ToolServices(fetch_policy=FetchPolicy(), jobs=jobs)))


def recorded(jobs: JobsService, job_id: str = "job-0001-abcdef", user: str = USER) -> JobMessage:
    job = JobMessage(job_id=job_id, user_id=user, tool="analyze_dataset", input={"dataset_url": "s3://b/k.csv"})
    assert jobs.store.create_pending(job)
    return job


def test_a_pending_job_cancelled_by_its_owner_is_cancelled_and_refuses_to_run(jobs):
    # Given a queued job
    job = recorded(jobs)

    # When its owner cancels it
    answer = jobs.cancel(USER, job.job_id)

    # Then it is CANCELLED, the worker's claim is refused (the job as it stands comes back) and its result
    # write is refused as a cancellation
    assert answer == {"jobId": job.job_id, "status": "CANCELLED"}
    assert jobs.store.is_cancelled(job.job_id)
    now_ms = int(time.time() * 1000)
    refused = jobs.store.claim_run(job, attempt=1, until_ms=now_ms + 60_000, now_ms=now_ms)
    assert refused is not None and refused["status"] == JobStatus.CANCELLED
    with pytest.raises(JobCancelled):
        jobs.store.mark_succeeded(job, result_text="{}")
    assert jobs.store.get(job.job_id)["status"] == JobStatus.CANCELLED


def test_cancelling_anothers_job_or_a_finished_one_is_refused_and_writes_nothing(jobs):
    # Given bob's job and alice's finished job
    bobs = recorded(jobs, "job-0002-abcdef", OTHER)
    finished = recorded(jobs, "job-0003-abcdef")
    jobs.store.mark_succeeded(finished, result_text='{"rowCount":1}')
    before = jobs.store.get(finished.job_id)

    # When alice cancels both
    # Then bob's is not found (indistinguishable from none) and hers is already finished; neither changes
    with pytest.raises(JobNotFound):
        jobs.cancel(USER, bobs.job_id)
    with pytest.raises(JobAlreadyFinished):
        jobs.cancel(USER, finished.job_id)
    assert jobs.store.get(bobs.job_id)["status"] == JobStatus.PENDING
    assert jobs.store.get(finished.job_id) == before


def test_a_result_dynamodb_refuses_for_its_size_is_a_permanent_failure():
    # Given a table client that refuses the write as DynamoDB does for an item over 400 KB
    class Refusing:
        class exceptions:  # the boto3 client's attribute
            ConditionalCheckFailedException = type("ConditionalCheckFailedException", (Exception,), {})

        def update_item(self, **_: Any) -> None:
            message = "Item size to update has exceeded the maximum allowed size"
            raise ClientError({"Error": {"Code": "ValidationException", "Message": message}}, "UpdateItem")

    job = JobMessage(job_id="job-0004-abcdef", user_id=USER, tool="analyze_dataset", input={})

    # When the worker records the result
    # Then it is ResultTooLarge, which the worker treats as permanent (no retry, straight to the DLQ)
    with pytest.raises(ResultTooLarge) as refused:
        JobStore("JobTable", Refusing()).mark_succeeded(job, result_text="x")
    assert is_permanent(refused.value)


def all_pages(jobs: JobsService, job_id: str) -> list[str]:
    """Every resultChunk of a job's result, following the cursors."""
    pages, cursor = [], None
    while True:
        page = jobs.page(USER, job_id, cursor)
        pages.append(page["resultChunk"])
        cursor = page.get("nextCursor")
        if cursor is None:
            return pages


def test_a_large_result_is_paged_from_the_result_bucket(jobs, local):
    # Given a SUCCEEDED job whose result lives in the result bucket
    job = recorded(jobs)
    text = json.dumps({"columns": ["c" * 100] * 5000})
    boto3.client("s3").put_object(Bucket=local.table_name("JobResultBucket"), Key="results/k.json", Body=text)
    jobs.store.mark_succeeded(job, result_key="results/k.json")

    # When its owner pages it
    pages = all_pages(jobs, job.job_id)

    # Then the pages join to the stored text, and the item itself holds only the key
    assert "".join(pages) == text and len(pages) > 1
    assert "result" not in jobs.store.get(job.job_id)


class RecordingS3:
    """The real (moto) S3 client, recording each GetObject's Range and the bytes it returned."""

    def __init__(self) -> None:
        self._s3 = boto3.client("s3")
        self.reads: list[tuple[str | None, int]] = []

    def get_object(self, **request: Any) -> dict[str, Any]:
        answer = self._s3.get_object(**request)
        body = answer["Body"].read()
        self.reads.append((request.get("Range"), len(body)))
        answer["Body"] = io.BytesIO(body)
        return answer

    def __getattr__(self, name: str) -> Any:
        return getattr(self._s3, name)


def large_result(jobs: JobsService, local, size_hint: int = 5000) -> tuple[JobMessage, str]:
    job = recorded(jobs)
    text = json.dumps({"columns": ["c" * 100] * size_hint}, separators=(",", ":"))
    boto3.client("s3").put_object(Bucket=local.table_name("JobResultBucket"), Key="results/k.json", Body=text)
    jobs.store.mark_succeeded(job, result_key="results/k.json")
    return job, text


def test_each_page_of_a_large_result_reads_only_its_own_bytes(local):
    # Given a result of about 500 KB in the result bucket and pages of 64 KiB
    s3 = RecordingS3()
    queues = JobQueues(
        job_table_name=local.table_name("JobTable"),
        job_queue_url=local.queue_url("JobQueue"),
        job_dead_letter_queue_url=local.queue_url("JobDeadLetterQueue"),
        result_bucket_name=local.table_name("JobResultBucket"),
        result_page_bytes=64 * 1024,
    )
    jobs = JobsService(queues, AwsClients(lambda service: s3 if service == "s3" else boto3.client(service)))
    job, text = large_result(jobs, local)

    # When its owner reads every page
    pages = all_pages(jobs, job.job_id)

    # Then the pages join to the result, and each page was one ranged read of at most a page: the bytes read in
    # all equal the result's size (never the whole object per page)
    assert "".join(pages) == text
    assert all(requested is not None and read <= 64 * 1024 for requested, read in s3.reads)
    assert sum(read for _, read in s3.reads) == len(text)


def test_a_task_with_a_large_result_answers_its_first_page_and_the_cursor_for_the_rest(jobs, local):
    # Given a completed task whose result is larger than a page
    job, text = large_result(jobs, local)

    # When its owner polls it
    task = job_tasks(jobs).task(ALICE, job.job_id)

    # Then it is completed with the first page and a cursor, not the whole result
    assert task["status"] == "completed"
    first = task["result"]["structuredContent"]
    assert len(first["resultChunk"]) == jobs.queues.result_page_bytes < len(text)
    assert first["resultChars"] == len(text) and "nextCursor" in first
    assert "get_job" in task["result"]["content"][0]["text"]
    # And it links the result resource, which reads the whole result in pages
    link = task["result"]["content"][1]
    assert (link["type"], link["uri"], link["size"]) == ("resource_link", f"job://{job.job_id}/result", len(text))


def test_a_checkpoint_stops_a_cancelled_run_and_is_free_elsewhere():
    cancelled = ToolContext(tool_name="analyze_dataset", user_id=USER, cancelled=lambda: True)
    running = ToolContext(tool_name="analyze_dataset", user_id=USER, cancelled=lambda: False)
    on_endpoint = ToolContext(tool_name="analyze_dataset", user_id=USER)

    with pytest.raises(JobCancelled):
        cancelled.checkpoint()
    running.checkpoint()
    on_endpoint.checkpoint()


@pytest.mark.parametrize(
    ("status", "extra", "expected"),
    [
        (JobStatus.PENDING, {}, "working"),
        (JobStatus.RUNNING, {}, "working"),
        (JobStatus.CANCELLED, {}, "cancelled"),
        (JobStatus.FAILED, {"error": {"type": "DatasetUnreachable", "message": "no such key"}}, "completed"),
        (JobStatus.FAILED, {"error": {"type": "UnknownTool", "message": "no tool"}}, "failed"),
    ],
)
def test_a_job_reads_as_the_task_the_specification_describes(jobs, status, extra, expected):
    # Given a job in some state
    job = recorded(jobs)
    names = {"#s": "status", **({"#e": "error"} if extra else {})}
    expression = "SET #s = :s" + (", #e = :e" if extra else "")
    values: dict[str, Any] = {":s": {"S": status}}
    if extra:
        error = extra["error"]
        values[":e"] = {"M": {"type": {"S": error["type"]}, "message": {"S": error["message"]}}}
    boto3.client("dynamodb").update_item(
        TableName=jobs.queues.job_table_name,
        Key={"jobId": {"S": job.job_id}},
        UpdateExpression=expression,
        ExpressionAttributeNames=names,
        ExpressionAttributeValues=values,
    )

    # When it is read as a task
    task = job_tasks(jobs).task(ALICE, job.job_id)

    # Then its status is the spec's; a tool's own failure is a completed call with an error result, a pipeline
    # failure a failed task with a JSON-RPC error
    assert task["status"] == expected
    assert task["ttlMs"] > 0 and task["pollIntervalMs"] > 0
    if status == JobStatus.FAILED and expected == "completed":
        assert task["result"]["isError"] is True and task["result"]["resultType"] == "complete"
    if expected == "failed":
        assert task["error"]["code"] == -32603


def test_a_task_is_not_found_for_another_user_and_expired_past_its_ttl(jobs):
    job = recorded(jobs)
    tasks = job_tasks(jobs)

    with pytest.raises(MCPError) as foreign:
        tasks.task(BOB, job.job_id)
    boto3.client("dynamodb").update_item(
        TableName=jobs.queues.job_table_name,
        Key={"jobId": {"S": job.job_id}},
        UpdateExpression="SET expiresAt = :t",
        ExpressionAttributeValues={":t": {"N": str(int(time.time()) - 1)}},
    )
    with pytest.raises(MCPError) as expired:
        tasks.task(ALICE, job.job_id)

    not_found = (-32602, "Failed to retrieve task: Task not found")
    assert (foreign.value.error.code, foreign.value.error.message) == not_found
    gone = (-32602, "Failed to retrieve task: Task has expired")
    assert (expired.value.error.code, expired.value.error.message) == gone


def test_a_tool_that_only_runs_as_a_job_needs_the_extension_and_other_tools_pass_through(jobs):
    # Given a table with a job-only tool and a client that did not declare the Tasks extension
    job_only = dataclasses.replace(TOOLS["analyze_dataset"], mode=Mode.JOB)
    tasks = job_tasks(jobs, {"analyze_dataset": job_only, "get_job": TOOLS["get_job"]})
    ctx: Any = SimpleNamespace(protocol_version="2026-07-28", session=SimpleNamespace(client_capabilities=None))
    passed: list[str] = []

    async def call_next(_ctx: Any) -> dict[str, Any]:
        passed.append("handler")
        return {"content": []}

    async def call(name: str) -> Any:
        return await tasks.intercept_tool_call(CallToolRequestParams(name=name, arguments={}), ctx, call_next)

    # When it calls the job-only tool, and a tool that is not a job
    with pytest.raises(MCPError) as refused:
        anyio.run(call, "analyze_dataset")
    anyio.run(call, "get_job")

    # Then the first is the spec's missing-capability error naming the extension, with nothing queued, and
    # the second reaches its handler as before
    assert refused.value.error.code == -32021
    assert refused.value.error.data == {"requiredCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}}}
    assert passed == ["handler"]
    assert local_queue_is_empty(jobs)


def local_queue_is_empty(jobs: JobsService) -> bool:
    attributes = boto3.client("sqs").get_queue_attributes(
        QueueUrl=jobs.queues.job_queue_url, AttributeNames=["ApproximateNumberOfMessages"]
    )["Attributes"]
    return attributes["ApproximateNumberOfMessages"] == "0"


def token_caller(*scopes: Access) -> ScopedPrincipal:
    return ScopedPrincipal(user_id=USER, access=frozenset(scope.value for scope in scopes))


def as_caller(principal: Principal, handler: Any, params: Any) -> Any:
    """A 2025-11-25 tasks/* handler run as the HTTP guard runs it: its caller in the request's context."""
    token = CALLER.set(principal)
    try:
        return anyio.run(handler, SimpleNamespace(request=None), params)
    finally:
        CALLER.reset(token)


def test_a_task_of_a_submit_tool_needs_the_submit_scope_to_be_read_or_cancelled(jobs):
    # Given alice's finished task of analyze_dataset (a SUBMIT tool), served in both eras
    job = recorded(jobs)
    jobs.store.mark_succeeded(job, result_text='{"rowCount":1}')
    tasks = job_tasks(jobs)
    legacy = LegacyJobTasks(tasks, result_wait_seconds=0)
    params: Any = SimpleNamespace(task_id=job.job_id)
    reader, submitter = token_caller(Access.READ), token_caller(Access.READ, Access.SUBMIT)

    # When her token with only `read` asks for its status, its result or its cancellation
    refusals = []
    for answer in (
        lambda: tasks.task(reader, job.job_id),
        lambda: tasks.owned(reader, job.job_id),
        lambda: as_caller(reader, legacy.get, params),
        lambda: as_caller(reader, legacy.result, params),
    ):
        with pytest.raises(MCPError) as refused:
            answer()
        refusals.append(refused.value.error)

    # Then each is refused naming the missing scope; with `submit` (and with her API key) the task reads
    assert {(e.code, e.message, json.dumps(e.data)) for e in refusals} == {
        (-32602, "Forbidden: insufficient scope", '{"requiredScope": "submit"}')
    }
    assert tasks.task(submitter, job.job_id)["status"] == "completed"
    assert as_caller(submitter, legacy.get, params)["status"] == "completed"
    assert as_caller(submitter, legacy.result, params)["structuredContent"] == {"rowCount": 1}
    assert tasks.task(ALICE, job.job_id)["status"] == "completed"


def test_a_task_of_a_read_tool_is_readable_with_the_read_scope(jobs):
    # Given a table whose READ tool also runs as a job, and alice's task of it
    reading = dataclasses.replace(TOOLS["get_job"], mode=Mode.BOTH)
    tasks = job_tasks(jobs, {"get_job": reading})
    job = JobMessage(job_id="job-0005-abcdef", user_id=USER, tool="get_job", input={"jobId": "job-0001-abcdef"})
    assert jobs.store.create_pending(job)

    # When her token with only `read` asks for its status
    task = tasks.task(token_caller(Access.READ), job.job_id)

    # Then it is answered
    assert task["status"] == "working"
