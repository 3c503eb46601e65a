"""The API key table's freshness and failure behaviour, and what the HTTP guard answers when it is down."""

from __future__ import annotations

import time

import anyio
import httpx

from mcp_backend.api_keys import new_api_key
from mcp_backend.mcp.auth import ApiKeyAuthenticator
from mcp_backend.mcp.guard import HostPolicy, McpHttpGuard


class CachedSecret:
    """Like the Parameters and Secrets extension: a cached (stale) value unless read fresh (the SDK)."""

    def __init__(self, cached: str, current: str) -> None:
        self.cached, self.current = cached, current
        self.failing = False
        self.reads: list[bool] = []

    def read(self, fresh: bool = False) -> str:
        self.reads.append(fresh)
        if self.failing:
            raise ConnectionResetError("secret store unreachable")
        return self.current if fresh else self.cached


def authenticate(authenticator: ApiKeyAuthenticator, key: str):
    return anyio.run(authenticator.authenticate, key)


def test_a_key_added_since_the_extension_cached_the_table_works_after_one_refresh(monkeypatch):
    # Given a table loaded (through the extension) before a new key was added
    alice_key, old_table = new_api_key("user-alice")
    new_key, new_table = new_api_key("user-bob", existing_secret=old_table)
    secret = CachedSecret(cached=old_table, current=new_table)
    authenticator = ApiKeyAuthenticator(secret, cache_seconds=300)
    assert authenticate(authenticator, alice_key) is not None

    # When the new key is presented once the 30 s refresh guard has passed
    now = time.monotonic()
    monkeypatch.setattr(time, "monotonic", lambda: now + 31)
    principal = authenticate(authenticator, new_key)

    # Then the refresh bypassed the extension's cache (read fresh) and the key is accepted
    assert principal is not None and principal.user_id == "apikey:user-bob"
    assert secret.reads == [False, True]


def test_a_transient_read_failure_keeps_the_last_good_table():
    # Given a loaded table, then a secret store that fails
    key, table = new_api_key("user-alice")
    secret = CachedSecret(cached=table, current=table)
    authenticator = ApiKeyAuthenticator(secret, cache_seconds=0)
    assert authenticate(authenticator, key) is not None
    secret.failing = True

    # When the table is due for a refresh and the key is presented again
    principal = authenticate(authenticator, key)

    # Then the last good table still answers
    assert principal is not None and principal.user_id == "apikey:user-alice"


def test_no_readable_key_table_is_a_503_json_rpc_error_not_a_500():
    # Given an endpoint whose key table has never been readable
    secret = CachedSecret(cached="{}", current="{}")
    secret.failing = True

    async def inner(scope, receive, send):  # never reached
        raise AssertionError("the app must not run unauthenticated")

    guard = McpHttpGuard(
        inner, path="/mcp", hosts=HostPolicy(hosts=("testserver",)), authenticator=ApiKeyAuthenticator(secret)
    )

    # When a request arrives with a key
    async def post() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=guard), base_url="http://testserver") as client:
            return await client.post(
                "/mcp",
                json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                headers={"authorization": "Bearer mcpk_whatever", "accept": "application/json, text/event-stream"},
            )

    response = anyio.run(post)

    # Then the client is told to retry, in JSON-RPC, without a trace
    assert response.status_code == 503
    assert response.headers["retry-after"] == "5"
    assert response.json()["error"]["code"] == -32603
    assert "Traceback" not in response.text and "secret store" not in response.text
