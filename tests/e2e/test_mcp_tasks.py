"""MCP Tasks (io.modelcontextprotocol/tasks, 2026-07-28) on the local stack: job-capable tools called by a
client that declares the extension become tasks kept in JobTable and run by the real worker."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from typing import Any, ClassVar

import httpx
import pytest

from devstack.__main__ import issue_dev_keys
from devstack.wired_stack import dataset_prefix, local_dataset_url
from mcp_backend.jobs.store import JobStore
from tests.e2e.conftest import Endpoint, wait_until

pytestmark = pytest.mark.e2e

MODERN = "2026-07-28"
TASKS = "io.modelcontextprotocol/tasks"
SALES = local_dataset_url("apikey:user-alice", "sales.csv")  # alice's own prefix: datasets are per tenant
DEV_SALES = local_dataset_url("apikey:dev-user", "sales.csv")


def rpc(endpoint, method: str, params: dict[str, Any], key: str | None = None, tasks: bool = True) -> dict:
    """One 2026-07-28 request; its JSON-RPC answer (result or error)."""
    capabilities: dict[str, Any] = {"extensions": {TASKS: {}}} if tasks else {}
    meta = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": capabilities,
    }
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {**params, "_meta": meta}}
    routing = {"mcp-protocol-version": MODERN, "mcp-method": method}
    name = params.get("name", params.get("taskId"))
    if isinstance(name, str) and name.isascii() and name.isprintable():
        routing["mcp-name"] = name  # the task's id on tasks/* (the spec's routing header)
    headers = endpoint.headers(key or endpoint.alice_key, **routing)
    response = httpx.post(endpoint.url, json=body, headers=headers, timeout=60)
    if response.status_code == 400:  # the 2026-07-28 transport answers a JSON-RPC error with 400
        return response.json()
    assert response.status_code == 200, response.text
    if response.headers["content-type"].startswith("application/json"):
        return response.json()
    messages = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: ")]
    return next(message for message in messages if message.get("id") == 1)


def call_analysis(endpoint, dataset: str = SALES, **options: Any) -> dict:
    return rpc(endpoint, "tools/call", {"name": "analyze_dataset", "arguments": {"dataset_url": dataset}}, **options)


def job_item(endpoint, job_id: str) -> dict:
    stack = endpoint.local
    return JobStore(stack.table_name("JobTable"), stack.client("dynamodb")).get(job_id)


def test_a_task_is_created_polled_to_completed_and_carries_the_result(endpoint):
    # Given a client that declares the Tasks extension
    # When it calls a job-capable tool
    created = call_analysis(endpoint)["result"]

    # Then it is answered at once with a working task, and exactly one job is queued
    assert created["resultType"] == "task"
    assert created["status"] == "working"
    assert created["pollIntervalMs"] > 0 and created["ttlMs"] > 0
    assert endpoint.local.queue_depth("JobQueue") == 1
    task_id = created["taskId"]
    working = rpc(endpoint, "tasks/get", {"taskId": task_id})["result"]
    assert (working["resultType"], working["status"]) == ("complete", "working")

    # When the worker runs the job and the client polls
    endpoint.local.sqs_source_for("ToolWorker").drain()
    done = rpc(endpoint, "tasks/get", {"taskId": task_id})["result"]

    # Then the task is completed with the tool's result inlined
    assert done["status"] == "completed"
    assert done["result"]["isError"] is False
    assert done["result"]["structuredContent"]["rowCount"] == 6


def test_a_task_is_polled_from_another_endpoint_than_the_one_that_created_it(endpoint_factory):
    # Given two endpoint instances over the same stack (two execution environments of McpServer)
    first, second = endpoint_factory(), endpoint_factory()
    task_id = call_analysis(first)["result"]["taskId"]

    # When the job runs and the other instance is asked, with the same caller's key
    first.local.sqs_source_for("ToolWorker").drain()
    seen = rpc(second, "tasks/get", {"taskId": task_id}, key=first.alice_key)["result"]

    # Then it knows the task and its result: nothing lived in the first instance
    assert (seen["taskId"], seen["status"]) == (task_id, "completed")
    assert seen["result"]["structuredContent"]["rowCount"] == 6


def test_another_users_task_id_is_not_found_and_cannot_be_cancelled(endpoint):
    # Given alice's task
    task_id = call_analysis(endpoint)["result"]["taskId"]

    # When bob polls and cancels it
    polled = rpc(endpoint, "tasks/get", {"taskId": task_id}, key=endpoint.bob_key)
    cancelled = rpc(endpoint, "tasks/cancel", {"taskId": task_id}, key=endpoint.bob_key)

    # Then both are "not found" (-32602), exactly like an unknown id, and alice's job is untouched
    unknown = rpc(endpoint, "tasks/get", {"taskId": "0" * 32})
    assert polled["error"] == unknown["error"] == cancelled["error"]
    assert polled["error"]["code"] == -32602
    assert job_item(endpoint, task_id)["status"] == "PENDING"


def test_a_task_cancelled_before_it_runs_is_never_run(endpoint):
    # Given a queued task
    task_id = call_analysis(endpoint)["result"]["taskId"]

    # When its owner cancels it and the worker then receives its message
    ack = rpc(endpoint, "tasks/cancel", {"taskId": task_id})["result"]
    endpoint.local.sqs_source_for("ToolWorker").drain()

    # Then the cancel is acknowledged, the task is cancelled, the job never ran, and its message is gone
    # (deleted, not dead-lettered)
    assert ack["resultType"] == "complete"
    assert rpc(endpoint, "tasks/get", {"taskId": task_id})["result"]["status"] == "cancelled"
    item = job_item(endpoint, task_id)
    assert (item["status"], item.get("runs", 0)) == ("CANCELLED", 0)
    assert endpoint.local.queue_depth("JobQueue") == 0
    assert endpoint.local.queue_depth("JobDeadLetterQueue") == 0


def test_cancelling_a_finished_task_is_refused_and_changes_nothing(endpoint):
    # Given a completed task
    task_id = call_analysis(endpoint)["result"]["taskId"]
    endpoint.local.sqs_source_for("ToolWorker").drain()
    before = job_item(endpoint, task_id)

    # When its owner cancels it
    answer = rpc(endpoint, "tasks/cancel", {"taskId": task_id})

    # Then the spec's invalid-params error, and the job is as it was
    assert answer["error"]["code"] == -32602
    assert job_item(endpoint, task_id) == before


class Paused(http.server.BaseHTTPRequestHandler):
    """A loopback CSV that sends 1,500 rows, waits until the test lets it go on, then sends 1,500 more:
    the analysis is running (past its first checkpoint) while the test cancels."""

    resume: ClassVar[threading.Event] = threading.Event()
    started: ClassVar[threading.Event] = threading.Event()

    def do_GET(self) -> None:
        rows = b"".join(b"r%d,%d\n" % (i, i) for i in range(1500))
        self.send_response(200)
        self.send_header("content-type", "text/csv")
        self.end_headers()
        self.wfile.write(b"name,amount\n" + rows)
        self.wfile.flush()
        Paused.started.set()
        Paused.resume.wait(60)
        self.wfile.write(rows)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def paused_dataset() -> Iterator[str]:
    Paused.resume, Paused.started = threading.Event(), threading.Event()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Paused)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/paused.csv"
    Paused.resume.set()
    server.shutdown()
    thread.join(timeout=10)


def test_a_task_cancelled_while_it_runs_stops_and_is_never_completed(endpoint_factory, paused_dataset):
    # Given a task whose analysis is running (the dataset pauses after its first 1,500 rows)
    endpoint = endpoint_factory()
    endpoint.local.function_overrides["DATASET_ALLOW_LOOPBACK_HOSTS"] = "true"  # the worker reads the loopback CSV
    task_id = call_analysis(endpoint, paused_dataset)["result"]["taskId"]
    worker = threading.Thread(target=endpoint.local.sqs_source_for("ToolWorker").drain, daemon=True)
    worker.start()
    assert Paused.started.wait(60)
    assert wait_until(lambda: job_item(endpoint, task_id)["status"] == "RUNNING")

    # When its owner cancels it and the dataset goes on
    rpc(endpoint, "tasks/cancel", {"taskId": task_id})
    Paused.resume.set()
    worker.join(timeout=120)

    # Then the run stopped at its next checkpoint: the task stays cancelled with no result, and the message
    # is deleted, not retried or dead-lettered
    assert not worker.is_alive()
    task = rpc(endpoint, "tasks/get", {"taskId": task_id})["result"]
    assert task["status"] == "cancelled" and "result" not in task
    item = job_item(endpoint, task_id)
    assert (item["status"], item["runs"]) == ("CANCELLED", 1)
    assert "result" not in item and "resultKey" not in item
    assert endpoint.local.queue_depth("JobQueue") == 0
    assert endpoint.local.queue_depth("JobDeadLetterQueue") == 0


def test_a_client_without_the_capability_gets_the_plain_result_and_no_task_methods(endpoint):
    # When a client that does not declare the extension calls the tool and tasks/get
    answer = call_analysis(endpoint, tasks=False)["result"]
    polled = rpc(endpoint, "tasks/get", {"taskId": "0" * 32}, tasks=False)

    # Then it gets the synchronous result (no task, nothing queued) and the missing-capability error
    assert "taskId" not in answer and answer.get("resultType", "complete") == "complete"
    assert answer["structuredContent"]["rowCount"] == 6
    assert endpoint.local.queue_depth("JobQueue") == 0
    assert polled["error"]["code"] == -32021
    assert polled["error"]["data"]["requiredCapabilities"]["extensions"] == {TASKS: {}}


@pytest.mark.parametrize(
    "params",
    [{}, {"taskId": 7}, {"taskId": ""}, {"taskId": "x" * 500}],
    ids=["missing", "not-a-string", "empty", "too-long"],
)
def test_a_malformed_tasks_request_is_invalid_params(endpoint, params):
    for method in ("tasks/get", "tasks/cancel"):
        answer = rpc(endpoint, method, params)
        assert answer["error"]["code"] == -32602
        assert "Traceback" not in json.dumps(answer)


def test_tasks_update_is_acknowledged_for_a_known_task_and_not_found_otherwise(endpoint):
    task_id = call_analysis(endpoint)["result"]["taskId"]

    known = rpc(endpoint, "tasks/update", {"taskId": task_id, "inputResponses": {"name": {"action": "accept"}}})
    unknown = rpc(endpoint, "tasks/update", {"taskId": "0" * 32, "inputResponses": {}})

    assert known["result"]["resultType"] == "complete"
    assert unknown["error"]["code"] == -32602
    assert job_item(endpoint, task_id)["status"] == "PENDING"


def test_a_task_polled_past_its_ttl_is_expired_and_cannot_be_cancelled(endpoint):
    # Given a task whose record is past its TTL (DynamoDB deletes expired items lazily)
    task_id = call_analysis(endpoint)["result"]["taskId"]
    endpoint.local.client("dynamodb").update_item(
        TableName=endpoint.local.table_name("JobTable"),
        Key={"jobId": {"S": task_id}},
        UpdateExpression="SET expiresAt = :past",
        ExpressionAttributeValues={":past": {"N": "1000"}},
    )

    # When its owner polls and cancels it
    polled = rpc(endpoint, "tasks/get", {"taskId": task_id})
    cancelled = rpc(endpoint, "tasks/cancel", {"taskId": task_id})

    # Then both are the spec's expired error and the job is not cancelled
    assert polled["error"] == cancelled["error"]
    expired = (-32602, "Failed to retrieve task: Task has expired")
    assert (polled["error"]["code"], polled["error"]["message"]) == expired
    assert job_item(endpoint, task_id)["status"] == "PENDING"


def wide_csv(columns: int = 1000) -> bytes:
    """A CSV whose analysis (one summary per column, long names) is far over DynamoDB's 400 KB item limit, with a
    header the worker's memory budget still reads: a line is charged by its characters, and each name's "é"s take
    two bytes or more in the result's JSON."""
    names = [f"column_{index:05d}_" + "é" * 200 for index in range(columns)]
    return (",".join(names) + "\n" + ",".join(str(index) for index in range(columns)) + "\n").encode()


def test_a_result_over_400_kb_is_stored_in_the_result_bucket_and_read_back_whole(endpoint):
    # Given a dataset whose analysis is over 400 KB
    key = dataset_prefix("apikey:user-alice") + "wide.csv"
    endpoint.local.client("s3").put_object(Bucket="local-datasets", Key=key, Body=wide_csv())
    task_id = call_analysis(endpoint, f"s3://local-datasets/{key}")["result"]["taskId"]

    # When the worker runs it
    endpoint.local.sqs_source_for("ToolWorker").drain()

    # Then the job record holds only a pointer into the result bucket, the object is over 400 KB, and the task
    # carries its first page and the cursor to the rest (never the whole object on every poll)
    item = job_item(endpoint, task_id)
    assert item["status"] == "SUCCEEDED" and "result" not in item
    bucket = endpoint.local.table_name("JobResultBucket")
    stored = endpoint.local.client("s3").get_object(Bucket=bucket, Key=item["resultKey"])["Body"].read()
    assert len(stored) > 400 * 1024
    task = rpc(endpoint, "tasks/get", {"taskId": task_id})["result"]
    assert task["status"] == "completed"
    first = task["result"]["structuredContent"]
    assert stored.startswith(first["resultChunk"].encode()) and len(first["resultChunk"]) < len(stored)
    assert first["resultChars"] == len(stored) and first["nextCursor"]

    # And get_job pages the same result from the bucket: the pages join to the stored JSON text
    text, cursor = "", None
    while True:
        arguments = {"job_id": task_id, **({"cursor": cursor} if cursor else {})}
        page = rpc(endpoint, "tools/call", {"name": "get_job", "arguments": arguments})["result"]["structuredContent"]
        text += page["resultChunk"]
        cursor = page.get("nextCursor")
        if cursor is None:
            break
    assert text.encode() == stored


def test_without_a_result_bucket_an_oversized_result_fails_at_once_and_is_not_retried(endpoint):
    # Given a worker without a result bucket and a dataset whose analysis is over 400 KB
    endpoint.local.function_overrides["JOB_RESULT_BUCKET_NAME"] = ""
    key = dataset_prefix("apikey:user-alice") + "wide.csv"
    endpoint.local.client("s3").put_object(Bucket="local-datasets", Key=key, Body=wide_csv())
    task_id = call_analysis(endpoint, f"s3://local-datasets/{key}")["result"]["taskId"]

    # When the worker runs it
    endpoint.local.sqs_source_for("ToolWorker").drain()

    # Then DynamoDB's item-size refusal is a permanent failure: one run, FAILED, dead-lettered at once
    item = job_item(endpoint, task_id)
    assert (item["status"], item["runs"], item["error"]["type"]) == ("FAILED", 1, "ResultTooLarge")
    assert endpoint.local.queue_depth("JobQueue") == 0
    assert endpoint.local.queue_depth("JobDeadLetterQueue") == 1
    task = rpc(endpoint, "tasks/get", {"taskId": task_id})["result"]
    assert task["status"] == "failed" and task["error"]["code"] == -32603


def test_a_task_is_polled_from_a_new_execution_environment_of_the_served_function(start_stack):
    # Given the stack as make dev serves it, McpServer in its Lambda-shaped environments
    stack = start_stack()
    runtime = stack.environment.lambda_runtime
    if runtime is None:
        pytest.skip("in-process runtime: one app serves the Function URL; two endpoints are tested above")
    [key] = issue_dev_keys(stack).values()
    [web] = stack.web_functions.values()
    served = Endpoint(url=f"{web.url}/mcp", alice_key=key, bob_key=key, local=stack.environment)
    task_id = call_analysis(served, DEV_SALES)["result"]["taskId"]
    pool = runtime.pool("McpServer")
    creators = {env.process.pid for env in pool.environments() if env.process is not None}

    # When every environment that served the creation is shut down, the job runs, and the client polls
    for env in pool.release_all():
        env.stop()
    stack.settle()
    seen = rpc(served, "tasks/get", {"taskId": task_id})["result"]

    # Then a new environment (another process) answers with the completed task
    pollers = {env.process.pid for env in pool.environments() if env.process is not None and env.alive()}
    assert pollers and not pollers & creators
    assert (seen["status"], seen["result"]["structuredContent"]["rowCount"]) == ("completed", 6)
