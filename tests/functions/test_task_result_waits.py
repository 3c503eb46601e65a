"""A 2025-11-25 `tasks/result` waits for its task, and so holds an environment as a synchronous call does: it takes
one of its principal's calls-in-flight slots (RateLimitTable on moto, the McpServer function's own settings), past
the tier's cap it is refused with the calls-in-flight 429, and it answers a task still working after a few seconds
(TASK_RESULT_WAIT_SECONDS), not after the synchronous deadline."""

from __future__ import annotations

import json
import time
from typing import Any

import anyio
import boto3
import httpx

from mcp_backend.api_keys import Principal
from mcp_backend.call_slots import SLOT_LINGER_SECONDS
from mcp_backend.config import McpSettings, load_settings
from mcp_backend.mcp.server import create_app
from tests.unit.endpoint_fakes import HOST, EveryoneIs, ServedInProcess

LEGACY = "2025-11-25"
HEADERS = {
    "accept": "application/json, text/event-stream",
    "content-type": "application/json",
    "authorization": "Bearer bobs-key",
    "mcp-protocol-version": LEGACY,
}
# Every token is bob's, a free-tier principal.
BOB = EveryoneIs(Principal(user_id="user-bob", tier="free"))


async def rpc(client: httpx.AsyncClient, method: str, params: dict[str, Any]) -> httpx.Response:
    body = {"jsonrpc": "2.0", "id": 7, "method": method, "params": params}
    return await client.post(f"https://{HOST}/mcp", json=body, headers=HEADERS)


def answer_of(response: httpx.Response) -> dict[str, Any]:
    """The JSON-RPC answer, from a JSON body or the last message of an event stream."""
    if response.headers["content-type"].startswith("application/json"):
        return response.json()
    messages = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: ")]
    return next(message for message in reversed(messages) if message.get("id") == 7)


def held_slots(table: str) -> int:
    """bob's slots a running request holds: a hold longer than the linger of a slot given back (the task's own
    tools/call left one). The scan runs beside the app's writes, and moto builds a new item before its update's
    attributes: a slot item seen without `expiresAt` is one being taken, not yet held."""
    items = boto3.client("dynamodb").scan(TableName=table)["Items"]
    return sum(
        1
        for item in items
        if item["id"]["S"].startswith("inflight#user-bob#")
        and int(item.get("expiresAt", {}).get("N", "0")) > time.time() + SLOT_LINGER_SECONDS
    )


def test_concurrent_task_results_hold_at_most_the_tiers_slots_and_the_next_is_refused(local):
    # Given a free-tier principal (2 calls in flight) with a task no worker has run
    settings = load_settings(McpSettings, local.stack.function("McpServer").environment)
    cap = settings.tier_limits("free").calls_in_flight
    table = settings.rate_limit_table_name
    app = create_app(settings, authenticator=BOB, client_factory=boto3.client)
    waiting: list[httpx.Response] = []

    async def scenario() -> tuple[httpx.Response, httpx.Response, httpx.Response]:
        # A bound on the waits below, so a request that never takes a slot fails the test instead of hanging it.
        with anyio.fail_after(30):
            return await requests()

    async def requests() -> tuple[httpx.Response, httpx.Response, httpx.Response]:
        async with ServedInProcess(app) as client, anyio.create_task_group() as group:
            task = {"name": "analyze_dataset", "arguments": {"dataset_url": "https://example.com/a.csv"}}
            created = answer_of(await rpc(client, "tools/call", {**task, "task": {"ttl": 60000}}))
            task_id = created["result"]["task"]["taskId"]

            async def wait_for_result() -> None:
                waiting.append(await rpc(client, "tasks/result", {"taskId": task_id}))

            # When it asks for the task's result as often as its cap allows, and each request is waiting
            for _ in range(cap):
                group.start_soon(wait_for_result)
            while held_slots(table) < cap:
                await anyio.sleep(0.05)

            # And asks once more, then cancels the task (the waiting requests answer), then asks again
            refused = await rpc(client, "tasks/result", {"taskId": task_id})
            cancelled = await rpc(client, "tasks/cancel", {"taskId": task_id})
            while len(waiting) < cap:
                await anyio.sleep(0.05)
            after = await rpc(client, "tasks/result", {"taskId": task_id})
        return refused, cancelled, after

    refused, cancelled, after = anyio.run(scenario)

    # Then the one past the cap is the calls-in-flight 429 naming the limit and tier, with Retry-After
    assert refused.status_code == 429
    assert "calls_in_flight limit of 2 for tier free" in refused.json()["error"]["message"]
    assert int(refused.headers["retry-after"]) > 0
    # And the waiting ones were answered with the task's outcome once it was cancelled, freeing their slots
    assert answer_of(cancelled)["result"]["status"] == "cancelled"
    messages = [answer_of(response)["error"]["message"] for response in waiting]
    assert messages == ["Task was cancelled: it has no result"] * cap
    assert after.status_code == 200 and "cancelled" in answer_of(after)["error"]["message"]


def test_a_task_still_working_is_answered_after_the_configured_wait_for_the_client_to_poll(local):
    # Given an endpoint whose tasks/result waits half a second (its synchronous deadline stays a minute)
    environment = {**local.stack.function("McpServer").environment, "TASK_RESULT_WAIT_SECONDS": "0.5"}
    settings = load_settings(McpSettings, environment)
    assert settings.sync_call_deadline == 60
    app = create_app(settings, authenticator=BOB, client_factory=boto3.client)

    async def scenario() -> tuple[str, dict[str, Any]]:
        # A bound far below the deadline: a tasks/result that waits for the deadline fails the test.
        with anyio.fail_after(20):
            async with ServedInProcess(app) as client:
                task = {"name": "analyze_dataset", "arguments": {"dataset_url": "https://example.com/a.csv"}}
                created = answer_of(await rpc(client, "tools/call", {**task, "task": {"ttl": 60000}}))
                task_id = created["result"]["task"]["taskId"]

                # When the client asks for the result of a task no worker has run
                return task_id, answer_of(await rpc(client, "tasks/result", {"taskId": task_id}))

    task_id, answer = anyio.run(scenario)

    # Then it is the SDKs' "request timed out" carrying the working task: the client polls tasks/get and asks again
    error = answer["error"]
    assert error["code"] == -32001 and "poll tasks/get" in error["message"]
    assert (error["data"]["task"]["taskId"], error["data"]["task"]["status"]) == (task_id, "working")
