"""The local stack at rest: its event sources wait in long polls and on the write signal, yet a job sent
to an idle stack is picked up at once, and a stop (Ctrl-C) does not wait for the pollers' long polls."""

from __future__ import annotations

import json
import signal
import subprocess
import time

import pytest

from devstack.sources.sqs import LONG_POLL_SECONDS
from mcp_backend.jobs.store import JobStore
from tests.e2e.conftest import BUILD_DIR, MAKE_DEV_GROUP, PRODUCT_RUNTIME, start_make_dev

pytestmark = pytest.mark.e2e

SETTLE_SECONDS = 2  # long enough for every poller to be inside its first long poll


def job_status(stack, job_id: str) -> str | None:
    item = JobStore(stack.environment.table_name("JobTable"), stack.client("dynamodb")).get(job_id)
    return item["status"] if item else None


def test_a_job_sent_to_a_stack_at_rest_is_picked_up_before_the_pollers_long_polls_end(start_stack):
    # Given the product stack with its event sources running, its worker warm (as make dev starts it),
    # at rest: every SQS poller inside a long poll
    stack = start_stack(run_threads=True)
    stack.prewarm(["ToolWorker"])  # a cold start under load is not what this test is about
    time.sleep(SETTLE_SECONDS)

    # When a job is sent to JobQueue
    body: dict[str, object] = {"jobId": "job-at-rest-001", "userId": "user-e2e", "tool": "analyze_dataset"}
    body["input"] = {"dataset_url": "s3://local-datasets/user-e2e/sales.csv"}
    sent = time.monotonic()
    stack.client("sqs").send_message(QueueUrl=stack.environment.queue_url("JobQueue"), MessageBody=json.dumps(body))

    # Then the worker runs it to SUCCEEDED before the long polls under way would have ended: the message
    # ends the long poll waiting for it (make bench measures the latency: the batching window + the job)
    while job_status(stack, "job-at-rest-001") != "SUCCEEDED":
        assert time.monotonic() - sent < LONG_POLL_SECONDS - SETTLE_SECONDS, "the job waited out a long poll"
        time.sleep(0.1)


def test_a_stop_does_not_wait_for_the_pollers_long_polls(start_stack):
    # Given the product stack with its event sources running, at rest: every SQS poller inside a long poll
    stack = start_stack(run_threads=True)
    time.sleep(SETTLE_SECONDS)

    # When it is stopped
    started = time.monotonic()
    stack.stop()

    # Then the stop returned before a long poll could have ended: idle pollers hold nothing to finish
    assert stack.stopped
    assert time.monotonic() - started < LONG_POLL_SECONDS - SETTLE_SECONDS


def ctrl_c(process: subprocess.Popen[str], *, after_seconds: float = 0.0) -> str:
    """Ctrl-C sent to a started `devstack dev` once it has been at rest `after_seconds`: its output to its exit
    (killed if it has not exited a minute later). A failed start's assertion message calls it too, so no
    stack outlives its test."""
    try:
        time.sleep(after_seconds)
        process.send_signal(signal.SIGINT)
        output, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return output


@MAKE_DEV_GROUP
def test_ctrl_c_stops_make_dev_at_rest_and_exits_cleanly():
    # Given `python -m devstack dev` (what make dev runs) started
    process, _, line = start_make_dev("--runtime", PRODUCT_RUNTIME, "--build-dir", str(BUILD_DIR))
    assert "local stack ready" in line, (line, ctrl_c(process))

    # When Ctrl-C reaches it at rest
    output = ctrl_c(process, after_seconds=SETTLE_SECONDS)

    # Then it says so, stops and exits 0 without a traceback
    assert process.returncode == 0
    assert "stopping the local stack" in output
    assert "stopped." in output
    assert "Traceback" not in output


@MAKE_DEV_GROUP
def test_ctrl_c_stops_make_dev_started_with_sigint_ignored():
    # Given `python -m devstack dev` started as a shell starts a background job (or nohup a command): with
    # SIGINT ignored, which the process inherits
    process, _, line = start_make_dev(ignoring_sigint=True)
    assert "local stack ready" in line, (line, ctrl_c(process))

    # When Ctrl-C reaches it as soon as it says it is ready (while the rest of its banner may still be written)
    output = ctrl_c(process)

    # Then it stops and exits 0 all the same, without a traceback: Ctrl-C is how the stack is stopped
    assert process.returncode == 0
    assert "stopped." in output
    assert "Traceback" not in output
