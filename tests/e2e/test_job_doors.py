"""Every door into the job queue applies one policy. The doors are enumerated from the endpoint itself: the submit
tools it lists for each job-capable tool of the table, and the Tasks extension's task-augmented call of that tool.
Through each, a free-tier tenant is refused a dataset outside its prefix (the tool's admission check) and a job past
its concurrent-job quota, and nothing is written for either. The Tasks extension's call (2026-07-28) and the
2025-11-25 task-augmented call (`params.task`) are doors of their own."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import boto3
import pytest

from devstack.wired_stack import local_dataset_url
from mcp_backend.quotas import QuotaExceeded
from mcp_backend.tools.table import TOOLS
from tests.e2e.test_mcp_tasks import rpc
from tests.e2e.test_tasks_2025 import call_as_task

pytestmark = pytest.mark.e2e

BOB = "apikey:user-bob"  # the endpoint fixture's free-tier key
FREE_CONCURRENT_JOBS = 2
JOB_TOOLS = [tool for tool in TOOLS.values() if tool.runs_as_job]
Door = Callable[[Any, str, str], dict[str, Any]]


def submit_one(tool_name: str) -> Door:
    def call(endpoint, dataset: str, call_id: str) -> dict[str, Any]:
        arguments = {"dataset_url": dataset, "callId": call_id}
        result = rpc(endpoint, "tools/call", {"name": tool_name, "arguments": arguments}, endpoint.bob_key, False)
        content = result["result"]
        if content.get("isError"):
            return {"error": content["content"][0]["text"].removeprefix(f"Error executing tool {tool_name}: ")}
        return content["structuredContent"]

    return call


def submit_batch(tool_name: str) -> Door:
    def call(endpoint, dataset: str, call_id: str) -> dict[str, Any]:
        arguments = {"items": [{"dataset_url": dataset, "callId": call_id}]}
        result = rpc(endpoint, "tools/call", {"name": tool_name, "arguments": arguments}, endpoint.bob_key, False)
        (item,) = result["result"]["structuredContent"]["results"]
        return {"error": f"{item['error']['type']}: {item['error']['message']}"} if "error" in item else item

    return call


def task_call(tool_name: str) -> Door:
    def call(endpoint, dataset: str, call_id: str) -> dict[str, Any]:
        # A task has no callId: each call is a new job.
        result = rpc(
            endpoint, "tools/call", {"name": tool_name, "arguments": {"dataset_url": dataset}}, endpoint.bob_key
        )
        content = result["result"]
        return {"error": content["content"][0]["text"]} if content.get("isError") else {"jobId": content["taskId"]}

    return call


def legacy_task_call(tool_name: str) -> Door:
    def call(endpoint, dataset: str, call_id: str) -> dict[str, Any]:
        # A 2025-11-25 task has no callId either: each call is a new job.
        content = call_as_task(endpoint, dataset, endpoint.bob_key, tool_name)["result"]
        return (
            {"error": content["content"][0]["text"]} if content.get("isError") else {"jobId": content["task"]["taskId"]}
        )

    return call


DOORS: dict[str, Door] = {}
for _tool in JOB_TOOLS:
    DOORS[f"tools/call {_tool.submit_name}"] = submit_one(_tool.submit_name)
    DOORS[f"tools/call {_tool.submit_many_name}"] = submit_batch(_tool.submit_many_name)
    DOORS[f"tasks: tools/call {_tool.name}"] = task_call(_tool.name)
    DOORS[f"tasks 2025-11-25: tools/call {_tool.name}"] = legacy_task_call(_tool.name)


def jobs_of(endpoint, user_id: str) -> list[dict]:
    items = boto3.client("dynamodb").scan(TableName=endpoint.local.table_name("JobTable"))["Items"]
    return [item for item in items if item.get("userId", {}).get("S") == user_id and "tool" in item]


def test_the_doors_enumerated_are_every_door_the_endpoint_lists(endpoint):
    # Given the tools the endpoint lists
    listed = {tool["name"] for tool in rpc(endpoint, "tools/list", {}, tasks=False)["result"]["tools"]}

    # When the synchronous tools are set aside
    submit_tools = listed - {tool.name for tool in TOOLS.values() if tool.runs_sync}

    # Then every other listed tool is a submit door this file tests (a new door fails here until it is added)
    assert {f"tools/call {name}" for name in submit_tools} == {door for door in DOORS if not door.startswith("tasks")}


@pytest.mark.parametrize("door", sorted(DOORS))
def test_every_door_applies_the_tools_admission_check(endpoint, door):
    # Given a free-tier tenant and a dataset under another tenant's prefix
    others = local_dataset_url("apikey:user-alice", "sales.csv")

    # When it submits a job for that dataset through the door
    answer = DOORS[door](endpoint, others, "not-mine")

    # Then the tool's admission check refuses it and no job is written
    assert answer.get("error", "").startswith("DatasetAccessDenied"), answer
    assert jobs_of(endpoint, BOB) == []


@pytest.mark.parametrize("door", sorted(DOORS))
def test_every_door_applies_the_tiers_job_quota(endpoint, door):
    # Given a free-tier tenant and its own dataset
    own = local_dataset_url(BOB, "sales.csv")

    # When it submits one job more than its tier's concurrent jobs through the door
    answers = [DOORS[door](endpoint, own, f"call-{n}") for n in range(FREE_CONCURRENT_JOBS + 1)]

    # Then the jobs within the quota are queued, the one past it is refused naming the limit, and only the
    # admitted jobs are written
    assert all("jobId" in answer for answer in answers[:FREE_CONCURRENT_JOBS]), answers
    refused = answers[-1].get("error", "")
    assert refused.startswith(QuotaExceeded.__name__) and "concurrent_jobs" in refused and "free" in refused
    assert len(jobs_of(endpoint, BOB)) == FREE_CONCURRENT_JOBS
