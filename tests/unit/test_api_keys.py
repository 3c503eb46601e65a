"""API key authentication: hashed storage, the secrets extension first, the SDK where it is absent."""

from __future__ import annotations

import http.server
import json
import threading

import anyio
import boto3
import pytest

from devstack.ports import free_port

# mcp_backend.mcp.* is imported inside the tests: it loads the shared Logger/Metrics, which read their
# settings from the environment once, and at collection time the function environment is not set yet.


# moto's in-process Secrets Manager is not thread-safe (a read can iterate a secret's versions while another
# thread adds one); on AWS each API call is atomic. Serialising each call keeps that atomicity and leaves the
# races between calls, which are what these tests are about.
MOTO_CALL_LOCK = threading.Lock()


class AtomicCalls:
    def __init__(self, client) -> None:
        self._client = client

    def __getattr__(self, name: str):
        attribute = getattr(self._client, name)
        if not callable(attribute):
            return attribute

        def call(*args, **kwargs):
            with MOTO_CALL_LOCK:
                return attribute(*args, **kwargs)

        return call


def test_a_new_key_is_stored_only_as_its_hash():
    from mcp_backend.api_keys import hash_api_key, new_api_key

    key, secret = new_api_key("user-alice", "pro")

    table = json.loads(secret)
    assert key not in secret
    assert table == {hash_api_key(key): {"userId": "user-alice", "tier": "pro"}}


def test_the_secret_is_read_through_the_extension_with_the_session_token(monkeypatch):
    from mcp_backend.api_keys import SecretReader, new_api_key

    # Given a stand-in for the Parameters and Secrets extension on a local port
    _, secret = new_api_key("user-alice")
    seen = {}

    class Extension(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            seen["path"] = self.path
            seen["token"] = self.headers["X-Aws-Parameters-Secrets-Token"]
            body = json.dumps({"SecretString": secret}).encode()
            self.send_response(200)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Extension)
    port = server.server_address[1]
    threading.Thread(target=server.handle_request, daemon=True).start()
    monkeypatch.setenv("AWS_SESSION_TOKEN", "session-token-xyz")

    # When the reader fetches the secret
    text = SecretReader("arn:aws:secretsmanager:us-east-1:1:secret:keys", port, client_factory=lambda: None).read()

    # Then it came from the extension, authenticated with the session token
    server.server_close()
    assert text == secret
    assert seen["token"] == "session-token-xyz"
    assert seen["path"].startswith("/secretsmanager/get?secretId=arn%3Aaws%3Asecretsmanager")


def test_without_the_extension_the_sdk_is_used_and_keys_authenticate(aws):
    from mcp_backend.api_keys import SecretReader, new_api_key
    from mcp_backend.mcp.auth import ApiKeyAuthenticator

    # Given a secret holding alice's hashed key, and no extension listening
    key, secret = new_api_key("user-alice", "pro")
    arn = boto3.client("secretsmanager").create_secret(Name="keys", SecretString=secret)["ARN"]
    authenticator = ApiKeyAuthenticator(SecretReader(arn, free_port()), cache_seconds=300)

    # When a valid, an unknown and a malformed key are presented
    alice = anyio.run(authenticator.authenticate, key)
    unknown = anyio.run(authenticator.authenticate, key[:-1] + ("A" if key[-1] != "A" else "B"))
    malformed = anyio.run(authenticator.authenticate, "x" * 1000)

    # Then only the valid key names a user
    assert (alice.user_id, alice.tier) == ("apikey:user-alice", "pro")
    assert unknown is None and malformed is None
    assert authenticator.reader.extension_available is False


def test_an_entry_too_long_to_carry_the_namespace_is_refused_and_the_others_still_work(aws):
    from mcp_backend.api_keys import SecretReader, hash_api_key, new_api_key
    from mcp_backend.mcp.auth import ApiKeyAuthenticator

    # Given a key table with alice's key and an entry written before ids were namespaced, whose 127-character id
    # is valid as stored and too long once prefixed with the API-key namespace
    key, secret = new_api_key("user-alice", "pro")
    old_key = "mcpk_" + "o" * 43
    table = {**json.loads(secret), hash_api_key(old_key): {"userId": "u" * 127, "tier": "pro"}}
    arn = boto3.client("secretsmanager").create_secret(Name="keys", SecretString=json.dumps(table))["ARN"]
    authenticator = ApiKeyAuthenticator(SecretReader(arn, free_port()), cache_seconds=300)

    # When both keys are presented
    old = anyio.run(authenticator.authenticate, old_key)
    alice = anyio.run(authenticator.authenticate, key)

    # Then the old entry's key is refused, and alice's names her, namespaced
    assert old is None
    assert alice.user_id == "apikey:user-alice"


def test_a_key_added_during_rotation_works_without_waiting_for_the_cache(aws, monkeypatch):
    from mcp_backend.api_keys import SecretReader, add_api_key
    from mcp_backend.mcp.auth import ApiKeyAuthenticator

    secrets = boto3.client("secretsmanager")
    arn = secrets.create_secret(Name="keys", SecretString="{}")["ARN"]
    authenticator = ApiKeyAuthenticator(SecretReader(arn, free_port()), cache_seconds=0)
    assert anyio.run(authenticator.authenticate, "mcpk_nothing-yet") is None

    key = add_api_key(secrets, arn, "user-bob")

    assert anyio.run(authenticator.authenticate, key).user_id == "apikey:user-bob"


def test_concurrent_adds_never_lose_a_key(aws):
    from concurrent.futures import ThreadPoolExecutor

    from mcp_backend.api_keys import add_api_key, hash_api_key, list_api_keys

    # Given the key secret as the template creates it, and many writers at once (operators, the dispatcher)
    secret_id = boto3.client("secretsmanager").create_secret(Name="keys", SecretString="{}")["ARN"]
    barrier = threading.Barrier(8)

    def add(user_id: str) -> str:
        client = AtomicCalls(boto3.client("secretsmanager"))
        barrier.wait(timeout=60)  # every writer reads the same table before any writes
        return add_api_key(client, secret_id, user_id)

    # When 8 writers each add 3 keys concurrently
    with ThreadPoolExecutor(max_workers=8) as pool:
        keys = list(pool.map(add, [f"user-{n}" for n in range(24)]))

    # Then every key that was handed out is in the table (a last-writer-wins update would keep only some)
    stored = list_api_keys(boto3.client("secretsmanager"), secret_id)
    assert {hash_api_key(key) for key in keys} <= set(stored)
    assert len(stored) == 24


def test_a_revoke_racing_adds_removes_only_its_key(aws):
    from concurrent.futures import ThreadPoolExecutor

    from mcp_backend.api_keys import add_api_key, hash_api_key, list_api_keys, revoke_api_key

    # Given a table with one key to revoke, and writers adding keys while it is revoked
    client = boto3.client("secretsmanager")
    secret_id = client.create_secret(Name="keys", SecretString="{}")["ARN"]
    doomed = hash_api_key(add_api_key(client, secret_id, "user-old"))
    barrier = threading.Barrier(5)

    def add(user_id: str) -> str:
        own = AtomicCalls(boto3.client("secretsmanager"))
        barrier.wait(timeout=60)
        return add_api_key(own, secret_id, user_id)

    def revoke() -> bool:
        own = AtomicCalls(boto3.client("secretsmanager"))
        barrier.wait(timeout=60)
        return revoke_api_key(own, secret_id, doomed)

    # When they run at once
    with ThreadPoolExecutor(max_workers=5) as pool:
        added = [pool.submit(add, f"user-{n}") for n in range(4)]
        revoked = pool.submit(revoke)

    # Then the revoked key is gone and every added one is there
    stored = list_api_keys(client, secret_id)
    assert revoked.result() is True
    assert doomed not in stored
    assert {hash_api_key(f.result()) for f in added} == set(stored)


def test_the_operators_command_adds_a_key_and_refuses_an_add_without_a_user(aws, capsys):
    from mcp_backend.api_keys import hash_api_key, main

    # Given an empty key table
    arn = boto3.client("secretsmanager").create_secret(Name="keys", SecretString="{}")["ARN"]

    # When the operator adds a key for alice, and then runs add without --user-id
    assert main(["add", "--secret-id", arn, "--user-id", "user-alice", "--tier", "pro"]) == 0
    key = capsys.readouterr().out.strip()
    with pytest.raises(SystemExit) as refused:
        main(["add", "--secret-id", arn])

    # Then the table holds the printed key's hash for alice, and the second command exits with a usage error
    stored = boto3.client("secretsmanager").get_secret_value(SecretId=arn, VersionStage="AWSCURRENT")
    table = json.loads(stored["SecretString"])
    assert table[hash_api_key(key)] == {"userId": "user-alice", "tier": "pro"}
    assert refused.value.code == 2 and "add needs --user-id" in capsys.readouterr().err
