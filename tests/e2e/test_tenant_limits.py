"""Limits by tier through the real endpoint, tried as a hostile tenant: one key trying to exceed each limit
gets a clear, typed refusal and leaves nothing behind."""

from __future__ import annotations

import httpx

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
