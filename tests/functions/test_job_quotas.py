"""Concurrent and daily job quotas against the template's JobTable on moto: a refused submission writes
nothing, a job that ends frees its slot, and a slot whose job ended without freeing it is reclaimed."""

from __future__ import annotations

import datetime as dt
import json
from concurrent.futures import ThreadPoolExecutor

import boto3
import pytest
import time_machine

from mcp_backend.aws import AwsClients
from mcp_backend.config import McpSettings, load_settings
from mcp_backend.jobs.models import JobError, JobMessage
from mcp_backend.jobs.service import JobsService, JobSubmission
from mcp_backend.jobs.store import JobStore
from mcp_backend.mcp.server import tool_bindings
from mcp_backend.quotas import JobQuota, QuotaExceeded
from tests.instants import day_start

NOW = day_start(days_ago=2) + dt.timedelta(hours=15)  # 15:00 two days ago: the next day is still past


@pytest.fixture
def jobs(local) -> JobsService:
    settings = load_settings(McpSettings, local.stack.function("McpServer").environment)
    return tool_bindings(settings, AwsClients(boto3.client)).jobs


def job_items(local, user_id: str) -> list[dict]:
    items = boto3.client("dynamodb").scan(TableName=local.table_name("JobTable"))["Items"]
    return [item for item in items if item.get("userId", {}).get("S") == user_id]


def analysis(call_id: str) -> JobSubmission:
    return JobSubmission(tool="analyze_dataset", input={"dataset_url": "s3://b/k.csv"}, call_id=call_id)


def message(job_id: str, user_id: str = "user-a") -> JobMessage:
    return JobMessage(
        job_id=job_id, user_id=user_id, tool="analyze_dataset", input={"dataset_url": "s3://b/k.csv"}, submitted_at=NOW
    )


def test_a_submission_over_the_concurrent_limit_is_refused_and_writes_nothing(local, jobs):
    # Given a free-tier caller allowed 2 jobs at once, with 2 PENDING
    quota = JobQuota("free", concurrent_jobs=2, daily_jobs=100)
    held = [jobs.submit("user-a", analysis(f"call-{n}"), quota)["jobId"] for n in range(2)]

    # When it submits a third
    with pytest.raises(QuotaExceeded) as refused:
        jobs.submit("user-a", analysis("call-3"), quota)

    # Then the error names the limit, the tier and what frees a slot, and no third job exists
    assert str(refused.value).startswith("concurrent_jobs limit of 2 for tier free reached; a slot frees when")
    assert sorted(item["jobId"]["S"] for item in job_items(local, "user-a")) == sorted(held)
    assert local.queue_depth("JobQueue") == 2

    # And another caller is not affected
    assert jobs.submit("user-b", analysis("call-1"), quota)["status"] == "PENDING"


def test_a_repeat_at_the_limit_is_answered_and_takes_no_slot(jobs):
    # Given a caller at its limit of 1
    quota = JobQuota("free", concurrent_jobs=1, daily_jobs=100)
    first = jobs.submit("user-a", analysis("call-1"), quota)

    # When it repeats the same callId
    again = jobs.submit("user-a", analysis("call-1"), quota)

    # Then it gets the same job, not a refusal
    assert again["jobId"] == first["jobId"] and again["repeated"]


def test_a_job_that_ends_frees_its_slot(local, jobs):
    # Given a caller at its limit of 1
    quota = JobQuota("free", concurrent_jobs=1, daily_jobs=100)
    first = jobs.submit("user-a", analysis("call-1"), quota)["jobId"]
    with pytest.raises(QuotaExceeded):
        jobs.submit("user-a", analysis("call-2"), quota)

    # When the worker records the job's end (FAILED, as for a DLQ'd job), and then the next one SUCCEEDED
    store = JobStore(local.table_name("JobTable"), boto3.client("dynamodb"))
    store.mark_failed(first, "user-a", JobError(type="DatasetUnreachable", message="404"), "m-1", "analyze_dataset")
    second = jobs.submit("user-a", analysis("call-2"), quota)["jobId"]
    store.mark_succeeded(message(second), result_text=json.dumps({"rowCount": 1}))

    # Then each submission after an end is accepted
    assert jobs.submit("user-a", analysis("call-3"), quota)["status"] == "PENDING"


def test_a_slot_whose_job_stopped_being_updated_is_reclaimed(local, jobs):
    # Given a caller at its limit of 1 whose job's worker was killed while RUNNING (no end recorded)
    quota = JobQuota("free", concurrent_jobs=1, daily_jobs=100, slot_max_seconds=3600)
    with time_machine.travel(NOW, tick=False):
        first = jobs.submit("user-a", analysis("call-1"), quota)["jobId"]
        now_ms = int(NOW.timestamp() * 1000)
        store = JobStore(local.table_name("JobTable"), boto3.client("dynamodb"))
        assert store.claim_run(message(first), 1, until_ms=now_ms + 60_000, now_ms=now_ms) is None
        with pytest.raises(QuotaExceeded):
            jobs.submit("user-a", analysis("call-2"), quota)

    # When it submits again after the slot's lifetime
    with time_machine.travel(NOW + dt.timedelta(hours=2), tick=False):
        accepted = jobs.submit("user-a", analysis("call-2"), quota)

    # Then the stale slot was freed for it
    assert accepted["status"] == "PENDING"


def test_the_daily_limit_refuses_until_the_next_utc_day(local, jobs):
    # Given a caller allowed 2 jobs a day, with 2 submitted (and finished) today
    quota = JobQuota("free", concurrent_jobs=10, daily_jobs=2)
    with time_machine.travel(NOW, tick=False):
        for n in range(2):
            jobs.submit("user-a", analysis(f"call-{n}"), quota)

        # When it submits a third
        with pytest.raises(QuotaExceeded) as refused:
            jobs.submit("user-a", analysis("call-3"), quota)

    # Then the error says when it resets, nothing was written, and the next day it is accepted
    assert (
        str(refused.value)
        == f"daily_jobs limit of 2 for tier free reached; resets at {NOW + dt.timedelta(days=1):%Y-%m-%d}T00:00:00Z"
    )
    assert len(job_items(local, "user-a")) == 2
    with time_machine.travel(NOW + dt.timedelta(days=1), tick=False):
        assert jobs.submit("user-a", analysis("call-3"), quota)["status"] == "PENDING"


def test_a_batch_over_the_concurrent_limit_refuses_only_the_items_past_it(local, jobs):
    # Given a caller allowed 3 jobs at once
    quota = JobQuota("pro", concurrent_jobs=3, daily_jobs=100)

    # When it submits a batch of 5
    results = jobs.submit_many("user-a", [analysis(f"call-{n}") for n in range(5)], quota)

    # Then 3 are queued and the other 2 are each a QuotaExceeded entry; only 3 jobs exist
    assert [r.get("status") for r in results[:3]] == ["PENDING"] * 3
    assert [r["error"]["type"] for r in results[3:]] == ["QuotaExceeded"] * 2
    assert {r["error"]["limit"] for r in results[3:]} == {"concurrent_jobs"}
    assert len(job_items(local, "user-a")) == 3


def pending_jobs(local, user_id: str) -> int:
    return sum(1 for item in job_items(local, user_id) if item["status"]["S"] == "PENDING")


def two_instances(local) -> list[JobsService]:
    """Two instances of the endpoint's jobs service: each with its own leases and its own record of what it sent."""
    settings = load_settings(McpSettings, local.stack.function("McpServer").environment)
    return [tool_bindings(settings, AwsClients(boto3.client)).jobs for _ in range(2)]


def submit_from_both(instances: list[JobsService], quota: JobQuota, per_instance: int) -> list[str]:
    """Every submission of both instances at once (threads); the refusals' limits, one per refused submission."""

    def submit(args: tuple[int, int]) -> str:
        instance, n = args
        try:
            instances[instance].submit("user-a", analysis(f"call-{instance}-{n}"), quota)
        except QuotaExceeded as refused:
            return refused.limit
        return "admitted"

    work = [(instance, n) for n in range(per_instance) for instance in range(len(instances))]
    with ThreadPoolExecutor(max_workers=len(work)) as pool:
        return list(pool.map(submit, work))


def test_concurrent_submits_from_two_instances_pass_the_concurrent_limit_by_at_most_one(local):
    # Given a caller allowed 3 jobs at once, and two endpoint instances
    quota = JobQuota("free", concurrent_jobs=3, daily_jobs=1000)
    instances = two_instances(local)

    # When each instance receives 8 of its submissions at the same moment
    outcomes = submit_from_both(instances, quota, per_instance=8)

    # Then at most one job more than the limit is in flight (both may count the same jobs before either writes),
    # every other submission is refused for concurrency, and the limit still refuses the next one on either
    admitted = outcomes.count("admitted")
    assert 3 <= admitted <= 4
    assert pending_jobs(local, "user-a") == admitted
    assert set(outcomes) - {"admitted"} == {"concurrent_jobs"}
    for instance in instances:
        with pytest.raises(QuotaExceeded, match="concurrent_jobs"):
            instance.submit("user-a", analysis("call-after"), quota)


def test_two_instances_leasing_the_day_never_admit_more_than_the_daily_limit(local):
    # Given a caller allowed 20 jobs a day (leases of a tenth of what is left: 2 at first), and two instances
    quota = JobQuota("free", concurrent_jobs=100, daily_jobs=20)
    instances = two_instances(local)

    # When each instance receives 15 submissions at the same moment
    with time_machine.travel(NOW, tick=False):
        outcomes = submit_from_both(instances, quota, per_instance=15)

    # Then never more than the limit is admitted, and at most the unused part of each instance's last lease
    # (a block of 2) is lost to the caller; every refusal is the daily limit's
    admitted = outcomes.count("admitted")
    assert 20 - 2 * 2 <= admitted <= 20
    assert len(job_items(local, "user-a")) == admitted
    assert set(outcomes) - {"admitted"} == {"daily_jobs"}


def test_a_repeat_on_a_spent_day_is_answered_and_a_new_job_refused(jobs):
    # Given a caller whose day is spent, with one of the day's jobs repeated
    quota = JobQuota("free", concurrent_jobs=10, daily_jobs=1)
    first = jobs.submit("user-a", analysis("call-1"), quota)

    # When it repeats that callId, and then submits another
    again = jobs.submit("user-a", analysis("call-1"), quota)
    with pytest.raises(QuotaExceeded, match="daily_jobs"):
        jobs.submit("user-a", analysis("call-2"), quota)

    # Then the repeat is answered as the job, and the new one refused
    assert again["jobId"] == first["jobId"] and again["repeated"]
