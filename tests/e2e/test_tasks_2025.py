"""The 2025-11-25 task-augmented tool calls on the local stack, beside the Tasks extension and on the same JobTable
tasks. The installed SDK (2.x) has no client for them, so these are the spec's raw JSON-RPC requests over httpx:
https://modelcontextprotocol.io/specification/2025-11-25/basic/utilities/tasks"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import httpx
import pytest

from devstack.wired_stack import local_dataset_url
from mcp_backend.call_slots import SLOT_LINGER_SECONDS
from tests.e2e.test_mcp_tasks import MODERN, job_item
from tests.e2e.test_mcp_tasks import rpc as modern_rpc

pytestmark = pytest.mark.e2e

LEGACY = "2025-11-25"
SALES = local_dataset_url("apikey:user-alice", "sales.csv")
RELATED_TASK = "io.modelcontextprotocol/related-task"
# A tasks/result wait no in-process worker run outlasts on a loaded machine (the deployed default is a few seconds).
LONG_WAIT = "50"


def rpc(endpoint, method: str, params: dict[str, Any], key: str | None = None) -> dict:
    """One 2025-11-25 request (stateless: no session); its JSON-RPC answer (result or error)."""
    body = {"jsonrpc": "2.0", "id": 7, "method": method, "params": params}
    headers = endpoint.headers(key or endpoint.alice_key, **{"mcp-protocol-version": LEGACY})
    response = httpx.post(endpoint.url, json=body, headers=headers, timeout=60)
    assert response.status_code == 200, response.text
    if response.headers["content-type"].startswith("application/json"):
        return response.json()
    messages = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: ")]
    return next(message for message in messages if message.get("id") == 7)


def wait_until_a_result_is_waiting(endpoint, principal: str = "apikey:user-alice") -> None:
    """Until a tasks/result of the principal holds a calls-in-flight slot, which it takes before it reads its task: a
    hold longer than the linger of a slot given back (the task's own tools/call left one). moto builds a new item
    before its update's attributes, so a slot seen without `expiresAt` is one being taken, not yet held."""
    table = endpoint.local.table_name("RateLimitTable")
    dynamodb = endpoint.local.client("dynamodb")
    for _ in range(600):
        items = dynamodb.scan(TableName=table)["Items"]
        if any(
            item["id"]["S"].startswith(f"inflight#{principal}#")
            and int(item.get("expiresAt", {}).get("N", "0")) > time.time() + SLOT_LINGER_SECONDS
            for item in items
        ):
            return
        time.sleep(0.05)
    raise AssertionError("no tasks/result took a slot")


def call_as_task(endpoint, dataset: str = SALES, key: str | None = None, name: str = "analyze_dataset") -> dict:
    params = {"name": name, "arguments": {"dataset_url": dataset}, "task": {"ttl": 60000}}
    return rpc(endpoint, "tools/call", params, key)


def test_initialize_advertises_task_augmented_tool_calls_and_cancel_but_no_list(endpoint):
    # Given a 2025-11-25 client
    params = {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "legacy", "version": "1"}}

    # When it initializes
    capabilities = rpc(endpoint, "initialize", params)["result"]["capabilities"]

    # Then the server takes task-augmented tools/call and tasks/cancel, and offers no tasks/list
    assert capabilities["tasks"] == {"cancel": {}, "requests": {"tools": {"call": {}}}}


def test_an_older_client_is_not_offered_tasks(endpoint):
    # Given a 2025-06-18 client (tasks came with 2025-11-25)
    params = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "older", "version": "1"}}

    # When it initializes
    result = rpc(endpoint, "initialize", params)["result"]

    # Then no tasks capability is advertised
    assert result["protocolVersion"] == "2025-06-18"
    assert "tasks" not in result["capabilities"]


def test_the_listing_says_which_tools_run_as_tasks(endpoint):
    # Given the 2025-11-25 listing
    tools = {tool["name"]: tool for tool in rpc(endpoint, "tools/list", {})["result"]["tools"]}

    # Then the tool that runs both now and as a job takes a task optionally, and the others take none
    assert tools["analyze_dataset"]["execution"] == {"taskSupport": "optional"}
    assert all("execution" not in tool for name, tool in tools.items() if name != "analyze_dataset")

    # And the 2026-07-28 listing is unchanged (it has no execution field)
    modern = modern_rpc(endpoint, "tools/list", {}, tasks=False)["result"]["tools"]
    assert all("execution" not in tool for tool in modern)


def test_a_task_augmented_call_is_a_task_polled_to_completed_and_its_result_read(endpoint):
    # When a 2025-11-25 client calls a job-capable tool with params.task
    created = call_as_task(endpoint)["result"]

    # Then it is answered at once with a CreateTaskResult, and exactly one job is queued
    task = created["task"]
    assert task["status"] == "working"
    assert task["pollInterval"] > 0 and task["ttl"] > 0
    assert {"taskId", "createdAt", "lastUpdatedAt"} <= task.keys()
    assert endpoint.local.queue_depth("JobQueue") == 1
    assert rpc(endpoint, "tasks/get", {"taskId": task["taskId"]})["result"]["status"] == "working"

    # When the worker runs the job and the client polls, then asks for the result
    endpoint.local.sqs_source_for("ToolWorker").drain()
    polled = rpc(endpoint, "tasks/get", {"taskId": task["taskId"]})["result"]
    result = rpc(endpoint, "tasks/result", {"taskId": task["taskId"]})["result"]

    # Then the task is completed and its result is the tool call's own, tied to the task
    assert (polled["taskId"], polled["status"]) == (task["taskId"], "completed")
    assert result["isError"] is False
    assert result["structuredContent"]["rowCount"] == 6
    assert result["_meta"][RELATED_TASK] == {"taskId": task["taskId"]}


def test_tasks_result_waits_for_a_task_that_completes_meanwhile(endpoint_factory):
    # Given a working task, and a client waiting on its result (for longer than the worker may take here)
    endpoint = endpoint_factory(TASK_RESULT_WAIT_SECONDS=LONG_WAIT)
    task_id = call_as_task(endpoint)["result"]["task"]["taskId"]
    answers: list[dict] = []
    waiting = threading.Thread(target=lambda: answers.append(rpc(endpoint, "tasks/result", {"taskId": task_id})))
    waiting.start()

    # When the worker runs the job
    endpoint.local.sqs_source_for("ToolWorker").drain()
    waiting.join(timeout=60)

    # Then the waiting request is answered with the result
    (answer,) = answers
    assert answer["result"]["structuredContent"]["rowCount"] == 6


def test_a_waiting_tasks_result_streams_the_task_status_changes(endpoint_factory):
    # Given a working task, and a client waiting on its result over an event stream (as long as the worker takes)
    endpoint = endpoint_factory(TASK_RESULT_WAIT_SECONDS=LONG_WAIT)
    task_id = call_as_task(endpoint)["result"]["task"]["taskId"]
    answers: list[httpx.Response] = []
    body = {"jsonrpc": "2.0", "id": 7, "method": "tasks/result", "params": {"taskId": task_id}}
    headers = endpoint.headers(endpoint.alice_key, **{"mcp-protocol-version": LEGACY})
    waiting = threading.Thread(
        target=lambda: answers.append(httpx.post(endpoint.url, json=body, headers=headers, timeout=60))
    )
    waiting.start()
    wait_until_a_result_is_waiting(endpoint)

    # When the worker runs the job
    endpoint.local.sqs_source_for("ToolWorker").drain()
    waiting.join(timeout=60)

    # Then the stream carries notifications/tasks/status for the task's completion before the result
    (response,) = answers
    assert response.headers["content-type"].startswith("text/event-stream")
    messages = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: ")]
    methods = [message.get("method", "result" if "result" in message else "error") for message in messages]
    assert methods == ["notifications/tasks/status", "result"], messages
    status = messages[0]["params"]
    assert (status["taskId"], status["status"]) == (task_id, "completed")
    assert {"createdAt", "lastUpdatedAt", "ttl"} <= status.keys()
    assert messages[1]["result"]["structuredContent"]["rowCount"] == 6


def test_tasks_result_past_its_wait_tells_the_client_to_poll_again(endpoint_factory):
    # Given an endpoint whose tasks/result waits half a second for a task still working
    endpoint = endpoint_factory(TASK_RESULT_WAIT_SECONDS="0.5")
    task_id = call_as_task(endpoint)["result"]["task"]["taskId"]

    # When the client asks for the result of a task no worker has run
    answer = rpc(endpoint, "tasks/result", {"taskId": task_id})

    # Then it is the SDKs' "request timed out" carrying the working task, and the task is untouched
    error = answer["error"]
    assert error["code"] == -32001 and "poll tasks/get" in error["message"]
    assert (error["data"]["task"]["taskId"], error["data"]["task"]["status"]) == (task_id, "working")
    assert job_item(endpoint, task_id)["status"] == "PENDING"


def test_a_task_cancelled_is_never_run_and_has_no_result(endpoint):
    # Given a queued task
    task_id = call_as_task(endpoint)["result"]["task"]["taskId"]

    # When its owner cancels it and the worker then receives its message
    cancelled = rpc(endpoint, "tasks/cancel", {"taskId": task_id})["result"]
    endpoint.local.sqs_source_for("ToolWorker").drain()

    # Then the answer is the cancelled task, the job never ran, and a second cancel is refused
    assert (cancelled["taskId"], cancelled["status"]) == (task_id, "cancelled")
    assert job_item(endpoint, task_id)["status"] == "CANCELLED"
    assert rpc(endpoint, "tasks/result", {"taskId": task_id})["error"]["code"] == -32602
    assert rpc(endpoint, "tasks/cancel", {"taskId": task_id})["error"]["code"] == -32602


def test_another_principals_task_is_not_found(endpoint):
    # Given alice's task
    task_id = call_as_task(endpoint)["result"]["task"]["taskId"]

    # When bob reads, waits on and cancels it
    answers = [rpc(endpoint, method, {"taskId": task_id}, endpoint.bob_key) for method in TASK_METHODS]

    # Then each is "not found", exactly like an unknown id, and alice's job is untouched
    unknown = rpc(endpoint, "tasks/get", {"taskId": "0" * 32})["error"]
    assert [answer["error"] for answer in answers] == [unknown] * len(TASK_METHODS)
    assert unknown["code"] == -32602
    assert job_item(endpoint, task_id)["status"] == "PENDING"


TASK_METHODS = ("tasks/get", "tasks/result", "tasks/cancel")


def test_a_task_for_a_tool_that_never_runs_as_a_job_is_method_not_found(endpoint):
    # When a task-augmented call names a tool whose taskSupport is forbidden
    answer = rpc(endpoint, "tools/call", {"name": "list_endpoints", "arguments": {}, "task": {}})

    # Then it is -32601, as the spec has it, and nothing is queued
    assert answer["error"]["code"] == -32601
    assert endpoint.local.queue_depth("JobQueue") == 0


def test_one_task_is_read_in_both_eras(endpoint):
    # Given a task created by a 2025-11-25 client
    task_id = call_as_task(endpoint)["result"]["task"]["taskId"]

    # When a 2026-07-28 client of the same principal polls it through the Tasks extension
    modern = modern_rpc(endpoint, "tasks/get", {"taskId": task_id})["result"]

    # Then it is the same JobTable task
    assert (modern["taskId"], modern["status"]) == (task_id, "working")


def test_each_era_is_served_only_its_own_task_methods(endpoint):
    # Given a task
    task_id = call_as_task(endpoint)["result"]["task"]["taskId"]

    # When a 2025-11-25 client sends the extension's tasks/update, and a 2026-07-28 client sends tasks/result
    update = rpc(endpoint, "tasks/update", {"taskId": task_id, "inputResponses": {}})
    meta = {"io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": {}}
    body = {"jsonrpc": "2.0", "id": 1, "method": "tasks/result", "params": {"taskId": task_id, "_meta": meta}}
    routing = {"mcp-protocol-version": MODERN, "mcp-method": "tasks/result", "mcp-name": task_id}
    result = httpx.post(endpoint.url, json=body, headers=endpoint.headers(endpoint.alice_key, **routing), timeout=60)

    # Then both are method not found (the 2026-07-28 transport answers it with 404): neither era's methods leak
    # into the other
    assert update["error"]["code"] == result.json()["error"]["code"] == -32601
