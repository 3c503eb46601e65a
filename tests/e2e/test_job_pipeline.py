"""The product template's job pipeline on the local stack: moto server, event source, real worker."""

from __future__ import annotations

import datetime as dt
import http.server
import json
import socket
import subprocess
import sys
import threading
import time
from typing import ClassVar

import httpx
import pytest
import time_machine

import devstack.server
from devstack.sqs_extras.move_tasks import MotoServerWithMoveTasks
from mcp_backend.jobs.store import JobStore
from tests.e2e.conftest import free_port_block

pytestmark = pytest.mark.e2e


def submit(stack, job_id: str, dataset: str = "s3://local-datasets/user-e2e/sales.csv") -> str:
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


def test_a_permanent_failure_reaches_failed_and_the_dlq_within_one_batch_cycle(start_stack):
    # Given a job whose dataset does not exist (no retry can change that)
    stack = start_stack()
    submit(stack, "job-e2e-poison1", dataset="s3://local-datasets/user-e2e/absent.csv")

    # When the event source delivers one batch
    stack.environment.sqs_source_for("ToolWorker").poll_once()

    # Then the job is FAILED with the reason already, its message is in the DLQ with that reason, and
    # nothing is left on the job queue to retry
    item = job(stack, "job-e2e-poison1")
    assert (item["status"], item["runs"], item["error"]["type"]) == ("FAILED", 1, "DatasetUnreachable")
    [dead] = stack.client("sqs").receive_message(
        QueueUrl=stack.environment.queue_url("JobDeadLetterQueue"), MessageAttributeNames=["All"]
    )["Messages"]
    assert dead["MessageId"] == item["failedMessageId"]
    assert dead["MessageAttributes"]["failureType"]["StringValue"] == "DatasetUnreachable"
    assert "does not exist" in dead["MessageAttributes"]["failureReason"]["StringValue"]
    assert queue_attribute(stack, "JobQueue", "ApproximateNumberOfMessages") == "0"
    assert queue_attribute(stack, "JobQueue", "ApproximateNumberOfMessagesNotVisible") == "0"


class Dataset(http.server.BaseHTTPRequestHandler):
    """A loopback dataset server: `/flaky.csv` answers 503 the first time, `/unavailable.csv` always,
    `/slow.csv` after a delay."""

    CSV = b"region,amount\nnorth,1\nsouth,2\n"
    served: ClassVar[dict[str, int]] = {}
    delay_seconds = 0.0

    def do_GET(self) -> None:
        count = Dataset.served[self.path] = Dataset.served.get(self.path, 0) + 1
        if (self.path == "/flaky.csv" and count == 1) or self.path == "/unavailable.csv":
            self.send_response(503)
            self.send_header("content-length", "0")
            self.end_headers()
            return
        if self.path == "/slow.csv":
            time.sleep(Dataset.delay_seconds)
        self.send_response(200)
        self.send_header("content-type", "text/csv")
        self.send_header("content-length", str(len(self.CSV)))
        self.end_headers()
        self.wfile.write(self.CSV)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def dataset_server():
    Dataset.served = {}
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Dataset)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    thread.join(timeout=10)


def test_a_transient_failure_is_retried_and_succeeds_on_a_later_receive(start_stack, dataset_server):
    # Given a job whose dataset server answers 503 (a transient failure) once, then the data
    stack = start_stack()
    submit(stack, "job-e2e-flaky01", dataset=f"{dataset_server}/flaky.csv")
    visibility = int(queue_attribute(stack, "JobQueue", "VisibilityTimeout"))

    # When the first receive fails and the message comes back after the visibility timeout
    with time_machine.travel(stack.options.clock(), tick=True) as traveller:
        stack.settle()
        after_first = job(stack, "job-e2e-flaky01")
        traveller.shift(visibility + 1)
        stack.settle()

    # Then the first attempt was left to the queue's retry (not FAILED, not dead-lettered), and the second
    # receive succeeded, with both attempts recorded
    assert after_first["status"] == "RUNNING" and "error" not in after_first
    item = job(stack, "job-e2e-flaky01")
    assert (item["status"], item["attempts"], item["runs"], item["result"]["rowCount"]) == ("SUCCEEDED", 2, 2, 2)
    assert queue_attribute(stack, "JobDeadLetterQueue", "ApproximateNumberOfMessages") == "0"


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


def test_a_connection_made_while_the_stack_starts_cannot_take_its_ports(start_stack, monkeypatch):
    # Given a connection that, once the stack's AWS endpoint is up and before its Lambda endpoint and first
    # Function URL are served, is given the stack's other ports as its local port (connections take their
    # local port from the range free ports are probed in)
    taken: list[socket.socket] = []
    refused: list[int] = []

    class ConnectionTakingThePorts(MotoServerWithMoveTasks):
        def start(self) -> None:
            super().start()
            aws_port = self.get_host_and_port()[1]
            for port in (aws_port + 1, aws_port + 2):
                connection = socket.socket()
                try:
                    connection.bind(("127.0.0.1", port))
                    taken.append(connection)
                except OSError:
                    connection.close()
                    refused.append(port)

    monkeypatch.setattr(devstack.server, "MotoServerWithMoveTasks", ConnectionTakingThePorts)
    port = free_port_block()

    # When the stack starts on those ports
    try:
        stack = start_stack(aws_port_override=port, lambda_port=port + 1, web_port=port + 2)
    finally:
        for connection in taken:
            connection.close()

    # Then it held them from its start: the connection was refused both, and the stack serves on them
    assert refused == [port + 1, port + 2]
    assert stack.lambda_url == f"http://127.0.0.1:{port + 1}"
    unknown = httpx.post(f"{stack.lambda_url}/2015-03-31/functions/NoSuchFunction/invocations", timeout=10)
    assert unknown.status_code == 404
    assert [web.url for web in stack.web_functions.values()][:1] == [f"http://127.0.0.1:{port + 2}"]


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


def test_redrive_lists_then_moves_the_dlq_back_and_the_job_runs_again_with_its_history(start_stack, capsys):
    # Given a job that failed for good (its dataset was missing), its message in the DLQ
    from devstack.redrive import redrive_running_stack

    stack = start_stack()
    submit(stack, "job-e2e-redrive", dataset="s3://local-datasets/user-e2e/late.csv")
    stack.settle()
    assert job(stack, "job-e2e-redrive")["status"] == "FAILED"

    # When the operator lists what a redrive would move (DRY_RUN=1)
    capsys.readouterr()  # (the worker's log lines so far)
    assert redrive_running_stack(stack.aws_url, dry_run=True) == 0
    listed = json.loads(capsys.readouterr().out)

    # Then the job is listed with its failure, and nothing moved
    assert [(m["jobId"], m["failureType"]) for m in listed["messages"]] == [("job-e2e-redrive", "DatasetUnreachable")]
    assert job(stack, "job-e2e-redrive")["status"] == "FAILED"
    assert queue_attribute(stack, "JobDeadLetterQueue", "ApproximateNumberOfMessages") == "1"

    # When the data is fixed and the operator redrives
    stack.client("s3").put_object(Bucket="local-datasets", Key="user-e2e/late.csv", Body=b"region,amount\nnorth,1\n")
    capsys.readouterr()
    assert redrive_running_stack(stack.aws_url, dry_run=False) == 0
    moved = json.loads(capsys.readouterr().out)

    # Then the move task moved the message to JobQueue and the job is PENDING with its failure in its history
    assert moved["pendingAgain"] == ["job-e2e-redrive"]
    assert moved["task"] == {"Status": "COMPLETED", "ApproximateNumberOfMessagesMoved": 1}
    assert queue_attribute(stack, "JobDeadLetterQueue", "ApproximateNumberOfMessages") == "0"
    pending = job(stack, "job-e2e-redrive")
    assert (pending["status"], pending["runs"], "error" not in pending) == ("PENDING", 1, True)
    assert [(f["type"], f["attempts"]) for f in pending["failures"]] == [("DatasetUnreachable", 1)]

    # And when the worker runs it again, it succeeds, its history kept
    stack.settle()
    item = job(stack, "job-e2e-redrive")
    assert (item["status"], item["runs"], item["result"]["rowCount"], len(item["failures"])) == ("SUCCEEDED", 2, 1, 1)


def test_a_restart_keeps_each_messages_receive_count_so_a_poison_job_gets_no_extra_attempts(
    start_stack, tmp_path, dataset_server
):
    # Given a job that fails transiently every time (its dataset server answers 503), received twice (of its
    # three receives) by a stack that keeps state
    first = start_stack(state_dir=tmp_path)
    message_id = submit(first, "job-e2e-restart-poison", dataset=f"{dataset_server}/unavailable.csv")
    visibility = int(queue_attribute(first, "JobQueue", "VisibilityTimeout"))
    max_receives = json.loads(queue_attribute(first, "JobQueue", "RedrivePolicy"))["maxReceiveCount"]
    with time_machine.travel(first.options.clock(), tick=True) as traveller:
        for _ in range(max_receives - 1):
            first.settle()
            traveller.shift(visibility + 1)

        # When the stack stops and starts again from its state, and delivers until the message is gone
        first.stop()
        second = start_stack(state_dir=tmp_path)
        for _ in range(2):
            second.settle()
            traveller.shift(visibility + 1)
        dead = second.client("sqs").receive_message(
            QueueUrl=second.environment.queue_url("JobDeadLetterQueue"),
            MaxNumberOfMessages=10,
            AttributeNames=["ApproximateReceiveCount"],
        )["Messages"]

    # Then the job ran maxReceiveCount times in all (not three more after the restart), failed once, and the
    # same message (same id, its receive count kept) sits in the DLQ
    item = job(second, "job-e2e-restart-poison")
    assert (item["status"], item["runs"], item["error"]["type"]) == (
        "FAILED",
        max_receives,
        "DatasetTemporarilyUnreachable",
    )
    assert [m["MessageId"] for m in dead] == [message_id]
    assert int(dead[0]["Attributes"]["ApproximateReceiveCount"]) == max_receives + 1  # this peek is one more


def test_a_restart_keeps_visible_in_flight_and_delayed_messages_with_their_attributes(start_stack, tmp_path):
    # Given a queue no function reads, holding a visible message with attributes and a message group, a
    # message in flight (received once, hidden for 300 s) and one delayed by 600 s
    first = start_stack(state_dir=tmp_path)
    sqs, url = first.client("sqs"), first.environment.queue_url("JobDeadLetterQueue")
    attributes = {"jobType": {"DataType": "String", "StringValue": "analyze_dataset"}}
    visible = sqs.send_message(QueueUrl=url, MessageBody="visible", MessageAttributes=attributes, MessageGroupId="g1")
    in_flight = sqs.send_message(QueueUrl=url, MessageBody="in flight")
    delayed = sqs.send_message(QueueUrl=url, MessageBody="delayed", DelaySeconds=600)
    # (from now: the messages were stamped with the real time, later than the stack clock's start)
    with time_machine.travel(dt.datetime.now(dt.UTC), tick=True) as traveller:
        sqs.receive_message(QueueUrl=url, VisibilityTimeout=0, MaxNumberOfMessages=10)  # visible: one receive
        [hidden] = sqs.receive_message(QueueUrl=url, VisibilityTimeout=300, MaxNumberOfMessages=1)["Messages"]
        assert hidden["MessageId"] in (visible["MessageId"], in_flight["MessageId"])

        # When the stack stops and starts again from its state
        first.stop()
        second = start_stack(state_dir=tmp_path)
        sqs, url = second.client("sqs"), second.environment.queue_url("JobDeadLetterQueue")
        counts = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
        traveller.shift(601)
        messages: list[dict] = []
        for _ in range(3):  # a receive may return fewer messages than are visible
            messages += sqs.receive_message(
                QueueUrl=url,
                MaxNumberOfMessages=10,
                VisibilityTimeout=600,
                AttributeNames=["All"],
                MessageSystemAttributeNames=["All"],
                MessageAttributeNames=["All"],
            ).get("Messages", [])

    # Then one is visible, one still in flight and one still delayed, and once their time has come each is
    # the same message: id, body, attributes, message group, and its receive count (+1 for this receive)
    assert (
        counts["ApproximateNumberOfMessages"],
        counts["ApproximateNumberOfMessagesNotVisible"],
        counts["ApproximateNumberOfMessagesDelayed"],
    ) == ("1", "1", "1")
    by_body = {m["Body"]: m for m in messages}
    assert {m["MessageId"] for m in messages} == {visible["MessageId"], in_flight["MessageId"], delayed["MessageId"]}
    assert by_body["visible"]["MessageAttributes"] == attributes
    assert by_body["visible"]["Attributes"]["MessageGroupId"] == "g1"
    receives = {body: int(m["Attributes"]["ApproximateReceiveCount"]) for body, m in by_body.items()}
    hidden_body = "visible" if hidden["MessageId"] == visible["MessageId"] else "in flight"
    assert receives[hidden_body] == 3 and receives["delayed"] == 1


def test_a_restart_right_after_a_stop_binds_ports_that_still_have_connections_in_time_wait(start_stack):
    # Given the AWS port of a stack that served a connection it closed first (left in TIME_WAIT)
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        served, _ = listener.accept()
        served.close()  # the server side closes first: its end of the connection waits in TIME_WAIT
        client.close()
    with socket.socket() as plain, pytest.raises(OSError):
        plain.bind(("127.0.0.1", port))  # what a bind without SO_REUSEADDR meets for about a minute

    # When a stack starts on that port
    stack = start_stack(aws_port_override=port)

    # Then it starts and serves there
    assert stack.aws_url.endswith(f":{port}")
    assert stack.client("sqs").list_queues()["QueueUrls"]
