"""The product template's job pipeline on the local stack: moto server, event source, real worker."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest
import time_machine

from mcp_backend.jobs.store import JobStore

pytestmark = pytest.mark.e2e


def submit(stack, job_id: str, dataset: str = "s3://local-datasets/sales.csv") -> str:
    body = {"jobId": job_id, "userId": "user-e2e", "tool": "analyze_dataset", "input": {"dataset_url": dataset}}
    return stack.client("sqs").send_message(
        QueueUrl=stack.environment.queue_url("JobQueue"), MessageBody=json.dumps(body)
    )["MessageId"]


def job(stack, job_id: str) -> dict:
    return JobStore(stack.environment.table_name("JobTable"), stack.client("dynamodb")).get(job_id)


def queue_attribute(stack, queue: str, name: str) -> str:
    return stack.client("sqs").get_queue_attributes(QueueUrl=stack.environment.queue_url(queue), AttributeNames=[name])[
        "Attributes"
    ][name]


def test_a_job_is_processed_once(start_stack):
    # Given the product stack and a job on its queue
    stack = start_stack()
    submit(stack, "job-e2e-once-01")

    # When the event source delivers until idle
    stack.settle()

    # Then the job succeeded, its body ran once, and the queue is empty
    item = job(stack, "job-e2e-once-01")
    assert (item["status"], item["runs"], item["result"]["rowCount"]) == ("SUCCEEDED", 1, 6)
    assert queue_attribute(stack, "JobQueue", "ApproximateNumberOfMessages") == "0"


def test_a_poison_job_reaches_the_dlq_after_three_receives(start_stack):
    # Given a job whose dataset does not exist
    stack = start_stack()
    message_id = submit(stack, "job-e2e-poison1", dataset="s3://local-datasets/absent.csv")
    visibility = int(queue_attribute(stack, "JobQueue", "VisibilityTimeout"))
    max_receives = json.loads(queue_attribute(stack, "JobQueue", "RedrivePolicy"))["maxReceiveCount"]

    # When each failed receive waits out the queue's visibility timeout
    with time_machine.travel(stack.options.clock(), tick=True) as traveller:
        for _ in range(max_receives + 1):
            stack.settle()
            traveller.shift(visibility + 1)
        dead = stack.client("sqs").receive_message(
            QueueUrl=stack.environment.queue_url("JobDeadLetterQueue"), MaxNumberOfMessages=10
        )["Messages"]

    # Then the message sits in the DLQ and the job says why it failed
    assert [m["MessageId"] for m in dead] == [message_id]
    item = job(stack, "job-e2e-poison1")
    assert (item["status"], item["runs"], item["error"]["type"]) == ("FAILED", max_receives, "DatasetUnreachable")


def test_port_in_use_gives_a_clear_error_and_leaves_nothing_running():
    # Given the AWS endpoint port is taken
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]

        # When make dev's command starts on that port
        result = subprocess.run(
            [sys.executable, "-m", "devstack", "dev", "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=60,
        )

    # Then it exits (everything it starts lives in its one process) non-zero, with one clear line,
    # before starting anything
    assert result.returncode == 2
    assert f"port {port} on 127.0.0.1 is already in use" in result.stderr
    assert "ready" not in result.stdout


def test_state_folder_keeps_jobs_and_queued_messages_between_runs(start_stack, tmp_path):
    # Given a stack that keeps state in a folder, with a finished job and a message still queued
    first = start_stack(state_dir=tmp_path)
    submit(first, "job-e2e-kept-001")
    first.settle()
    waiting = submit(first, "job-e2e-kept-002")
    first.stop()

    # When the stack starts again from that folder
    second = start_stack(state_dir=tmp_path)

    # Then the finished job is still there and the queued job is delivered and runs
    assert job(second, "job-e2e-kept-001")["status"] == "SUCCEEDED"
    assert waiting
    second.settle()
    assert job(second, "job-e2e-kept-002")["status"] == "SUCCEEDED"


def test_fresh_start_ignores_saved_state(start_stack, tmp_path):
    # Given state saved by an earlier run
    first = start_stack(state_dir=tmp_path)
    submit(first, "job-e2e-gone-001")
    first.settle()
    first.stop()

    # When a stack starts without the folder
    second = start_stack()

    # Then it starts empty
    assert job(second, "job-e2e-gone-001") is None
