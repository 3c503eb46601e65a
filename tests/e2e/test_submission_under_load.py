"""Submissions through `make dev`'s MCP endpoint under concurrency and across a restart: one job, run once,
however many identical calls arrive at once, and every acknowledged job finishes exactly once even when the
stack is stopped and started again from its STATE folder mid-run."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest
import time_machine

from devstack.__main__ import issue_dev_keys
from mcp_backend.jobs.store import JobStore
from tests.e2e.conftest import Endpoint, mcp_client

pytestmark = pytest.mark.e2e
SALES = "s3://local-datasets/apikey%3Adev-user/sales.csv"
# No reserved concurrency: in the Lambda runtime the endpoint then runs up to 4 environments and further
# callers wait for one, instead of 20 cold starts at once on a small machine (or 429s past the reservation).
# Its hundreds of jobs wait for the delivery in between: more than the pro tier's concurrent jobs, and their
# sessions more requests a minute than its rate limit, so both limits are raised.
UNRESERVED = {"McpReservedConcurrency": "0", "ProConcurrentJobs": "1000", "ProRequestsPerMinute": "100000"}
# Clients submit a second apart until the test says stop; this bound only keeps a broken stop from hanging the test.
SUBMISSION_BOUND_SECONDS = 600


def served_endpoint(stack) -> Endpoint:
    [key] = issue_dev_keys(stack).values()
    [web] = stack.web_functions.values()
    return Endpoint(url=f"{web.url}/mcp", alice_key=key, bob_key=key, local=stack.environment)


def job(stack, job_id: str) -> dict | None:
    return JobStore(stack.environment.table_name("JobTable"), stack.client("dynamodb")).get(job_id)


async def submit(endpoint: Endpoint, call_id: str) -> dict:
    async with mcp_client(endpoint, "2026-07-28") as client:
        result = await client.call_tool("submit_analysis", {"dataset_url": SALES, "callId": call_id})
        assert not result.is_error, result.content
        return result.structured_content


def deliver_until_idle(stack) -> None:
    """Run the event sources, letting any message left in flight become visible again, until nothing moves."""
    sqs, url = stack.client("sqs"), stack.environment.queue_url("JobQueue")
    visibility = int(
        sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["VisibilityTimeout"])["Attributes"]["VisibilityTimeout"]
    )
    with time_machine.travel(stack.options.clock(), tick=True) as traveller:
        for _ in range(4):
            stack.settle()
            traveller.shift(visibility + 1)


def test_twenty_identical_calls_at_once_through_the_endpoint_run_one_job_once(start_stack):
    # Given make dev's served MCP endpoint
    stack = start_stack(parameters=UNRESERVED)
    endpoint = served_endpoint(stack)

    # When 20 clients submit the same call at the same moment
    async def twenty():
        return await asyncio.gather(*(submit(endpoint, "same-call-e2e") for _ in range(20)))

    results = asyncio.run(twenty())

    # Then all 20 are answered with one job (repeats of it while PENDING sent its message again), the job runs
    # once, and no message of it is left
    assert len({result["jobId"] for result in results}) == 1
    assert stack.environment.queue_depth("JobQueue") >= 1
    deliver_until_idle(stack)
    item = job(stack, results[0]["jobId"])
    assert (item["status"], item["runs"]) == ("SUCCEEDED", 1)
    assert stack.environment.queue_depth("JobQueue") == 0


def test_every_acknowledged_job_finishes_exactly_once_across_a_restart_mid_run(start_stack, tmp_path):
    # Given a stack keeping its state in a folder, and clients submitting jobs from 8 concurrent tasks until told
    # to stop (an event, not a count: however slow the machine, the stop comes while they submit)
    first = start_stack(state_dir=tmp_path, parameters=UNRESERVED)
    endpoint = served_endpoint(first)
    acknowledged: list[str] = []
    refused: list[str] = []
    failed_while_up: list[str] = []
    stopped, stop_clients = threading.Event(), threading.Event()
    give_up = time.monotonic() + SUBMISSION_BOUND_SECONDS

    async def client_task(task: int) -> None:
        n = 0
        while not stop_clients.is_set() and time.monotonic() < give_up:
            n += 1
            try:
                acknowledged.append((await submit(endpoint, f"load-{task}-{n}"))["jobId"])
            except Exception as error:  # after the stop: the stack went away, this job was never acknowledged
                (refused if stopped.is_set() else failed_while_up).append(type(error).__name__)
            await asyncio.sleep(1.0)  # clients keep submitting through the delivery and the stop

    async def all_tasks() -> None:
        await asyncio.gather(*(client_task(task) for task in range(8)))

    submitting = threading.Thread(target=asyncio.run, args=(all_tasks(),))
    submitting.start()

    # When the stack delivers some of them, and is stopped (Ctrl-C) while submissions continue
    deadline = time.monotonic() + 60
    while len(acknowledged) < 10 and time.monotonic() < deadline:
        time.sleep(0.05)
    # (the job queue's deliveries only, two batches: the call-log stream fills as fast as the clients submit, and
    # on a loaded machine its analyzer may not catch up with it before they stop, which a whole settle waits for)
    job_deliveries = first.environment.sqs_source_for("ToolWorker")
    for _ in range(2):
        job_deliveries.poll_once()
    stopped.set()  # from here a refusal is the stop's
    first.stop()
    # (the clients go on until one of them has been refused by the stopped stack)
    deadline = time.monotonic() + 60
    while not refused and time.monotonic() < deadline:
        time.sleep(0.05)
    stop_clients.set()
    submitting.join(timeout=120)
    # And it starts again from the folder and delivers until nothing moves
    second = start_stack(state_dir=tmp_path, parameters=UNRESERVED)
    deliver_until_idle(second)

    # Then every job the endpoint acknowledged succeeded, its body ran exactly once, and no message is left
    assert not failed_while_up
    assert len(acknowledged) >= 10 and refused, "the stop did not come mid-run"
    outcomes = {job_id: job(second, job_id) for job_id in acknowledged}
    lost = [job_id for job_id, item in outcomes.items() if item is None]
    assert not lost
    assert {(item["status"], item["runs"]) for item in outcomes.values()} == {("SUCCEEDED", 1)}, json.dumps(
        {job_id: (item["status"], item.get("runs")) for job_id, item in outcomes.items()}
    )
    assert second.environment.queue_depth("JobQueue") == 0
