"""Limits by tier through the real endpoint, tried as a hostile tenant: one key trying to exceed each limit
gets a clear, typed refusal and leaves nothing behind."""

from __future__ import annotations

import anyio
import boto3
import httpx

from devstack.wired_stack import local_dataset_url
from tests.e2e.conftest import mcp_client

# Each tenant's own copy of the sample (datasets are readable under their owner's prefix only).
SALES = local_dataset_url("apikey:user-bob", "sales.csv")
ALICE_SALES = local_dataset_url("apikey:user-alice", "sales.csv")
LIST_TOOLS = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}


def test_requests_over_the_tiers_rate_get_429_with_retry_after_and_others_are_unaffected(endpoint_factory):
    # Given an endpoint whose free tier allows 3 requests a minute (bob is free, alice pro)
    endpoint = endpoint_factory(LIMIT_FREE_REQUESTS_PER_MINUTE="3")

    # When bob sends 5 requests and alice one
    answers = [httpx.post(endpoint.url, json=LIST_TOOLS, headers=endpoint.headers(endpoint.bob_key)) for _ in range(5)]
    alice = httpx.post(endpoint.url, json=LIST_TOOLS, headers=endpoint.headers(endpoint.alice_key))

    # Then bob's first 3 are served and the rest are 429 with a Retry-After within the minute and a
    # JSON-RPC error naming the limit and the tier; alice's request is served
    assert [a.status_code for a in answers] == [200, 200, 200, 429, 429]
    for refused in answers[3:]:
        assert 1 <= int(refused.headers["retry-after"]) <= 60
        error = refused.json()["error"]
        assert "requests_per_minute" in error["message"] and "tier free" in error["message"]
    assert alice.status_code == 200


def test_an_unauthenticated_request_is_not_counted_against_anyone(endpoint_factory):
    # Given a free tier of 1 request a minute
    endpoint = endpoint_factory(LIMIT_FREE_REQUESTS_PER_MINUTE="1")

    # When requests with a wrong key come first, then bob's one request
    wrong = [httpx.post(endpoint.url, json=LIST_TOOLS, headers=endpoint.headers("not-a-key")) for _ in range(3)]
    bob = httpx.post(endpoint.url, json=LIST_TOOLS, headers=endpoint.headers(endpoint.bob_key))

    # Then the wrong ones are 401 and bob is served
    assert {w.status_code for w in wrong} == {401}
    assert bob.status_code == 200


def call(endpoint, key: str, tool: str, arguments: dict):
    async def go():
        async with mcp_client(endpoint, "2026-07-28", key) as client:
            return await client.call_tool(tool, arguments)

    return anyio.run(go)


def test_job_quotas_refuse_with_a_typed_error_and_queue_nothing_more(endpoint_factory):
    # Given a free tier of 1 concurrent job and batches of 2 items
    endpoint = endpoint_factory(LIMIT_FREE_CONCURRENT_JOBS="1", LIMIT_FREE_BATCH_ITEMS="2")

    # When bob submits one job, then another, then a batch of 3
    first = call(endpoint, endpoint.bob_key, "submit_analysis", {"dataset_url": SALES})
    second = call(endpoint, endpoint.bob_key, "submit_analysis", {"dataset_url": SALES})
    batch = call(endpoint, endpoint.bob_key, "submit_analyses", {"items": [{"dataset_url": SALES}] * 3})

    # Then only the first is queued; the second is a QuotaExceeded tool error naming the limit and tier;
    # in the batch, the third item is past the batch size and the two within it are over the concurrent limit
    assert not first.is_error
    assert second.is_error
    assert "QuotaExceeded: concurrent_jobs limit of 1 for tier free reached" in second.content[0].text
    errors = [result["error"] for result in batch.structured_content["results"]]
    assert [error["limit"] for error in errors] == ["concurrent_jobs", "concurrent_jobs", "batch_items"]
    assert endpoint.local.queue_depth("JobQueue") == 1

    # And alice (pro) is not held to bob's tier
    assert not call(endpoint, endpoint.alice_key, "submit_analysis", {"dataset_url": ALICE_SALES}).is_error


def test_endpoint_cap_and_unregister_through_the_tools(endpoint_factory):
    # Given a free tier of 2 endpoints, and bob with 2 registered
    endpoint = endpoint_factory(LIMIT_FREE_ENDPOINTS="2", PROBE_ALLOW_LOOPBACK_HOSTS="true")
    bob = endpoint.bob_key

    def register(n: int):
        return call(endpoint, bob, "register_endpoint", {"url": f"http://127.0.0.1:9/mcp{n}", "name": f"e{n}"})

    held = [register(n).structured_content["serverId"] for n in range(2)]

    # When he registers a third, alice tries to unregister one of his, and he unregisters it himself
    third = register(3)
    by_alice = call(endpoint, endpoint.alice_key, "unregister_endpoint", {"server_id": held[0]})
    by_bob = call(endpoint, bob, "unregister_endpoint", {"server_id": held[0]})
    again = call(endpoint, bob, "unregister_endpoint", {"server_id": held[0]})

    # Then the third is a QuotaExceeded tool error; alice gets "not found", as for no endpoint at all;
    # bob's unregister succeeds once, and his list and the cap follow it
    assert third.is_error and "QuotaExceeded: endpoints limit of 2 for tier free reached" in third.content[0].text
    assert by_alice.is_error and "EndpointNotFound: no endpoint " in by_alice.content[0].text
    assert by_bob.structured_content == {"serverId": held[0], "unregistered": True}
    assert again.is_error and "EndpointNotFound" in again.content[0].text
    listed = call(endpoint, bob, "list_endpoints", {}).structured_content["endpoints"]
    assert [e["serverId"] for e in listed] == held[1:]
    assert not register(3).is_error


def test_a_hostile_tenant_trying_every_limit_finds_nothing_past_them(endpoint_factory):
    # Given first an endpoint whose free tier allows 2 requests a minute: past them bob gets 429s, alice is served
    limited = endpoint_factory(LIMIT_FREE_REQUESTS_PER_MINUTE="2")
    statuses = [
        httpx.post(limited.url, json=LIST_TOOLS, headers=limited.headers(limited.bob_key)).status_code for _ in range(4)
    ]
    assert statuses == [200, 200, 429, 429]
    assert httpx.post(limited.url, json=LIST_TOOLS, headers=limited.headers(limited.alice_key)).status_code == 200

    # Given a free tier of 2 endpoints, 2 jobs at once, 3 jobs a day and batches of 2, and bob (free)
    endpoint = endpoint_factory(
        LIMIT_FREE_ENDPOINTS="2",
        LIMIT_FREE_CONCURRENT_JOBS="2",
        LIMIT_FREE_DAILY_JOBS="3",
        LIMIT_FREE_BATCH_ITEMS="2",
        PROBE_ALLOW_LOOPBACK_HOSTS="true",
    )
    bob, local = endpoint.bob_key, endpoint.local

    # When he registers 5 endpoints, submits a batch of 5 jobs, and after the worker ran them 5 more one by one
    registered = [
        call(endpoint, bob, "register_endpoint", {"url": f"http://127.0.0.1:9/e{n}", "name": "e"}) for n in range(5)
    ]
    batch = call(endpoint, bob, "submit_analyses", {"items": [{"dataset_url": SALES}] * 5})
    local.sqs_source_for("ToolWorker").drain()
    singles = [call(endpoint, bob, "submit_analysis", {"dataset_url": SALES}) for _ in range(5)]

    # Then 2 endpoints exist and 3 jobs (2 from the batch, the day's third alone); every other attempt is a
    # QuotaExceeded naming its limit and the tier
    assert [r.is_error for r in registered] == [False, False, True, True, True]
    assert sum(1 for r in batch.structured_content["results"] if "jobId" in r) == 2
    assert [r.is_error for r in singles] == [False, True, True, True, True]
    refusals = [r.content[0].text for r in registered[2:] + singles[1:]]
    refusals += [r["error"]["message"] for r in batch.structured_content["results"] if "error" in r]
    assert all("QuotaExceeded" in text or "limit of" in text for text in refusals)
    assert all("for tier free" in text for text in refusals)
    assert {text.split(" limit of")[0].split(": ")[-1] for text in refusals} == {
        "endpoints",
        "daily_jobs",
        "batch_items",
    }
    listed = call(endpoint, bob, "list_endpoints", {}).structured_content["endpoints"]
    assert len(listed) == 2
    jobs = boto3.client("dynamodb").scan(TableName=local.table_name("JobTable"))["Items"]
    assert sum(1 for job in jobs if job.get("userId", {}).get("S") == "apikey:user-bob") == 3
