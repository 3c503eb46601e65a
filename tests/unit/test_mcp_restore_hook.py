"""SnapStart on McpServer: the Web Adapter's after-restore hook. The adapter's own POST (loopback, not a relayed
invocation) refreshes what a snapshot shares (random state, cached AWS clients and boto3's default session) and
reads the API-key table again, so a key revoked since the snapshot is refused at once; a request from outside
never reaches the hook, and an endpoint without the setting serves no hook."""

from __future__ import annotations

import random
from typing import Any

import anyio
import boto3
import httpx

from mcp_backend.api_keys import SecretReader, new_api_key
from mcp_backend.mcp.auth import ApiKeyAuthenticator
from mcp_backend.mcp.server import create_app
from tests.unit.endpoint_fakes import SETTINGS, RoomyRateTable, ServedInProcess

HOOK = "/_lwa/after-restore"
LIST = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
MCP_HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


class KeySecret:
    """The ApiKeysSecret as the endpoint reads it; the test rewrites it (a revocation, a new key)."""

    def __init__(self, value: str) -> None:
        self.value = value
        self.reads: list[bool] = []  # each read: whether it bypassed the extension's cache

    def read(self, fresh: bool = False) -> str:
        self.reads.append(fresh)
        return self.value


def endpoint(secret: KeySecret, hook: str = HOOK) -> Any:
    settings = SETTINGS.model_copy(update={"aws_lwa_snapstart_after_restore_path": hook})
    return create_app(
        settings,
        authenticator=ApiKeyAuthenticator(secret, cache_seconds=300),
        client_factory=lambda service: RoomyRateTable(),
    )


async def post_hook(app: Any, method: str = "POST", headers: dict | None = None, client=("127.0.0.1", 5)) -> int:
    """The hook path called over loopback, as the adapter calls it (or as the arguments say)."""
    transport = httpx.ASGITransport(app=app, client=client)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8080") as http:
        return (await http.request(method, HOOK, headers=headers or {})).status_code


async def listing(http: httpx.AsyncClient, key: str) -> int:
    headers = {**MCP_HEADERS, "authorization": f"Bearer {key}"}
    return (await http.post("/mcp", json=LIST, headers=headers)).status_code


def test_the_adapters_after_restore_request_reloads_the_key_table_and_refreshes_what_a_snapshot_shares():
    # Given an endpoint whose key table was read during init (so it is in the snapshot), then a key revoked and
    # another added since
    old_key, table = new_api_key("user-alice", "pro")
    secret = KeySecret(table)
    app = endpoint(secret)

    async def scenario() -> tuple[int, int, int, list[float], list[float]]:
        async with ServedInProcess(app) as http:
            assert await listing(http, old_key) == 200
            new_key, secret.value = new_api_key("user-bob", "pro")
            assert await listing(http, old_key) == 200  # still cached: the snapshot's table
            boto3.setup_default_session(region_name="us-east-1")
            random.seed(7)
            snapshot_draws = [random.random() for _ in range(3)]
            random.seed(7)

            # When the adapter POSTs the after-restore hook over loopback, as after a restore
            hook = await post_hook(app)
            draws = [random.random() for _ in range(3)]
            return hook, await listing(http, old_key), await listing(http, new_key), draws, snapshot_draws

    hook, old_answer, new_answer, draws, snapshot_draws = anyio.run(scenario)

    # Then the hook answers 2xx (the adapter admits traffic), the revoked key is refused and the new one served at
    # once (the table read again, past the extension's restored cache), boto3 resolves its session again, and
    # random draws its own sequence
    assert hook == 204
    assert (old_answer, new_answer) == (401, 200)
    assert secret.reads == [False, True]
    assert boto3.DEFAULT_SESSION is None
    assert draws != snapshot_draws


def test_the_hook_is_unreachable_from_outside_and_refreshes_nothing():
    # Given an endpoint with the hook
    key, table = new_api_key("user-alice", "pro")
    secret = KeySecret(table)
    app = endpoint(secret)

    async def scenario() -> list[int]:
        async with ServedInProcess(app) as http:
            assert await listing(http, key) == 200
            # When its path is called as a relayed Function URL invocation, with a forwarded client address, from
            # a non-loopback client, or with another method
            return [
                await post_hook(app, headers={"x-amzn-request-context": "{}"}),
                await post_hook(app, headers={"x-forwarded-for": "127.0.0.1"}),
                await post_hook(app, client=("203.0.113.9", 443)),
                await post_hook(app, method="GET"),
            ]

    answers = anyio.run(scenario)

    # Then each is refused, and the key table was read once (by the listing), never by the hook
    assert answers == [403, 403, 403, 403]
    assert secret.reads == [False]


def test_without_the_setting_no_hook_is_served():
    # Given an endpoint without AWS_LWA_SNAPSTART_AFTER_RESTORE_PATH (SnapStart off, the default)
    _key, table = new_api_key("user-alice", "pro")
    app = endpoint(KeySecret(table), hook="")

    # When the adapter's hook path is posted to over loopback
    answer = anyio.run(post_hook, app)

    # Then the guard answers it as any other path: nothing is refreshed, no 2xx
    assert not 200 <= answer < 300


def test_after_a_restore_the_key_readers_secrets_client_is_built_again():
    # Given the key table read through the SDK during init, by a client the reader keeps (the snapshot's credentials)
    _key, table = new_api_key("user-alice", "pro")
    built: list[str] = []

    class SecretsManager:
        def get_secret_value(self, **_: Any) -> dict[str, str]:
            return {"SecretString": table}

    def factory() -> Any:
        built.append("secretsmanager")
        return SecretsManager()

    authenticator = ApiKeyAuthenticator(SecretReader("keys", client_factory=factory), cache_seconds=300)
    authenticator._current_table(False)

    # When the environment is restored and the table read again
    authenticator.reload_after_restore()
    authenticator._current_table(False)

    # Then the second read was made by a new client
    assert built == ["secretsmanager", "secretsmanager"]
