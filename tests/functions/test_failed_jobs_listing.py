"""list_failed_jobs against the template's JobTable (its FailedJobsByUser index) on moto: failures recorded by
the real ToolWorker (a missing dataset is a permanent failure: FAILED and dead-lettered at once), listed
through the tool table's list_failed_jobs tool."""

from __future__ import annotations

import copy
import datetime as dt
import json
import time

import boto3
import pytest
import time_machine

from mcp_backend.aws import AwsClients
from mcp_backend.config import McpSettings, load_settings
from mcp_backend.jobs.errors import InvalidCursor
from mcp_backend.jobs.models import JobMessage
from mcp_backend.jobs.store import JobStore
from mcp_backend.mcp.server import tool_bindings
from mcp_backend.tools.table import TOOLS
from tests.conftest import load_event

USERS = {"user-alice": 96, "user-bob": 24}  # 120 failed jobs in all


def final_attempt_batch(jobs: list[tuple[str, str]]) -> dict:
    """The worker's event for jobs whose dataset does not exist."""
    template = load_event("tool_worker/last-attempt-poison.json")["Records"][0]
    records = []
    for job_id, user in jobs:
        record = copy.deepcopy(template)
        record["messageId"] = f"msg-{job_id}"
        record["body"] = json.dumps(
            {
                "jobId": job_id,
                "userId": user,
                "tool": "analyze_dataset",
                "input": {"dataset_url": f"s3://local-datasets/{user}/absent.csv"},
            }
        )
        records.append(record)
    return {"Records": records}


def fail_jobs(local, users: dict[str, int]) -> dict[str, list[set[str]]]:
    """`users`' jobs, interleaved, failed by the worker in batches of 10, one batch a second later
    than the previous (a batch shares one timestamp); per user, the job ids of each batch, newest batch first."""
    order = [(f"job-{user[5:]}-{n:04d}", user) for n in range(max(users.values())) for user in users if n < users[user]]
    start = dt.datetime.now(dt.UTC)
    batches: dict[str, list[set[str]]] = {user: [] for user in users}
    for number, batch_start in enumerate(range(0, len(order), 10)):
        batch = order[batch_start : batch_start + 10]
        with time_machine.travel(start + dt.timedelta(seconds=number), tick=False):
            response = local.invoke("ToolWorker", final_attempt_batch(batch))
        assert response["batchItemFailures"] == []  # settled by the worker: FAILED, its message dead-lettered
        for user in users:
            batches[user].insert(0, {job_id for job_id, owner in batch if owner == user})
    # The DLQ holds far more messages than a page (those of both users, and messages of no job)
    sqs = boto3.client("sqs")
    for n in range(0, 120, 10):
        sqs.send_message_batch(
            QueueUrl=local.queue_url("JobDeadLetterQueue"),
            Entries=[{"Id": str(i), "MessageBody": f"dead {n + i}"} for i in range(10)],
        )
    return {user: [batch for batch in batches[user] if batch] for user in users}


@pytest.fixture
def failed_jobs(local) -> dict[str, list[set[str]]]:
    return fail_jobs(local, USERS)


@pytest.fixture
def a_few_failed_jobs(local) -> dict[str, list[set[str]]]:
    return fail_jobs(local, {"user-alice": 12, "user-bob": 3})


def newest_first(listed: list[str], batches: list[set[str]]) -> bool:
    """Every job of the batches listed exactly once, newer batches before older ones (jobs failed in one
    batch may come in any order among themselves)."""
    age = {job_id: number for number, batch in enumerate(batches) for job_id in batch}
    ages = [age.get(job_id, -1) for job_id in listed]
    return len(listed) == len(set(listed)) == len(age) and -1 not in ages and ages == sorted(ages)


def list_failed(local, user: str, **arguments) -> dict:
    settings = load_settings(McpSettings, local.stack.function("McpServer").environment)
    tool = TOOLS["list_failed_jobs"]
    services = tool_bindings(settings, AwsClients(boto3.client)).services
    return tool(arguments, services.context_for(tool, user))


def every_page(local, user: str, limit: int) -> list[dict]:
    pages, arguments = [], {"limit": limit}
    while True:
        page = list_failed(local, user, **arguments)
        pages.append(page)
        if "nextCursor" not in page:
            return pages
        arguments = {"limit": limit, "cursor": page["nextCursor"]}


def test_every_failed_job_of_each_user_is_listed_newest_first_however_deep_the_dlq(local, failed_jobs):
    # Given 96 failed jobs of alice and 24 of bob, and 120 other messages in the DLQ

    # When each user pages through list_failed_jobs 50 at a time
    alice, bob = every_page(local, "user-alice", 50), every_page(local, "user-bob", 50)

    # Then alice gets 50 + 46 of hers, bob his 24, each newest first with the worker's error and message id
    assert [len(page["failedJobs"]) for page in alice] == [50, 46]
    assert [len(page["failedJobs"]) for page in bob] == [24]
    assert newest_first([job["jobId"] for page in alice for job in page["failedJobs"]], failed_jobs["user-alice"])
    assert newest_first([job["jobId"] for page in bob for job in page["failedJobs"]], failed_jobs["user-bob"])
    first = alice[0]["failedJobs"][0]
    # And every field of a listed job is read from the job (no field is a constant)
    assert set(first) == {"jobId", "messageId", "tool", "status", "error", "failedAt"}
    assert (first["status"], first["error"]["type"], first["tool"]) == (
        "FAILED",
        "DatasetUnreachable",
        "analyze_dataset",
    )
    # And no page carries a figure of anyone else: nothing about the shared DLQ (its depth counts every tenant)
    assert all(set(page) <= {"failedJobs", "nextCursor"} for page in alice + bob)
    # And the DLQ was not touched: its messages (the 120 dead-lettered jobs and 120 others) are all still visible
    assert local.queue_depth("JobDeadLetterQueue") == 240
    # And the listed message id is the dead-lettered copy of the job's message
    assert dead_letter_sources(local)[first["messageId"]] == f"msg-{first['jobId']}"


def dead_letter_sources(local) -> dict[str, str]:
    """The DLQ's messages: message id -> the id of the job message it dead-letters (sourceMessageId)."""
    sqs, sources = boto3.client("sqs"), {}
    while batch := sqs.receive_message(
        QueueUrl=local.queue_url("JobDeadLetterQueue"),
        MaxNumberOfMessages=10,
        MessageAttributeNames=["All"],
        VisibilityTimeout=60,
    ).get("Messages", []):
        for message in batch:
            source = message.get("MessageAttributes", {}).get("sourceMessageId", {}).get("StringValue", "")
            sources[message["MessageId"]] = source
    return sources


def test_a_cursor_lists_only_the_callers_jobs_and_a_forged_one_is_refused(local, a_few_failed_jobs):
    # Given alice's cursor after her first page of 10
    cursor = list_failed(local, "user-alice", limit=10)["nextCursor"]

    # When bob passes it
    page = list_failed(local, "user-bob", limit=50, cursor=cursor)

    # Then he sees only his own jobs (the cursor names a position, never a user)
    assert {job["jobId"] for job in page["failedJobs"]} <= set().union(*a_few_failed_jobs["user-bob"])
    # And a cursor this server did not issue is a clear error
    with pytest.raises(InvalidCursor):
        list_failed(local, "user-alice", cursor="bm90LWEtY3Vyc29y")


def test_a_job_that_runs_again_leaves_the_failed_list(local, a_few_failed_jobs):
    # Given one of alice's newest failed jobs, redriven and picked up by the worker again
    newest = sorted(a_few_failed_jobs["user-alice"][0])[0]
    store = JobStore(local.table_name("JobTable"))
    job = store.get(newest)
    assert store.mark_redriven(job)
    now_ms = int(time.time() * 1000)
    absent = {"dataset_url": "s3://local-datasets/user-alice/absent.csv"}
    message = JobMessage(job_id=newest, user_id="user-alice", tool="analyze_dataset", input=absent)
    assert store.claim_run(message, attempt=1, until_ms=now_ms + 60_000, now_ms=now_ms) is None

    # When alice lists her failed jobs
    page = list_failed(local, "user-alice", limit=50)

    # Then it is no longer among them, and the rest still are
    assert job["status"] == "FAILED"
    listed = [listed_job["jobId"] for listed_job in page["failedJobs"]]
    assert newest not in listed and len(listed) == 11
