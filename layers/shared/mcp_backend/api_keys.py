"""The API keys in ApiKeysSecret: its one owner (the endpoint reads it, the probe dispatcher and operators
add keys). The secret holds `{"<sha256 hex of key>": {"userId": ..., "tier": ...}}`, so neither the secret
nor a log line ever holds a usable key.

    python -m mcp_backend.api_keys add --secret-id <ApiKeysSecretArn> --user-id alice [--tier pro]
    python -m mcp_backend.api_keys revoke --secret-id <ApiKeysSecretArn> --key-hash <sha256 hex>
    python -m mcp_backend.api_keys list --secret-id <ApiKeysSecretArn>

`add` prints the new key once; only its hash is stored. Rotation = add a new key for the same user,
switch the client, revoke the old hash. The endpoint sees a change within API_KEYS_CACHE_SECONDS.

Every change is a compare-and-swap on the secret's versions, so concurrent writers never lose each other's
keys: the new table is put as a version without AWSCURRENT, then AWSCURRENT is moved to it only from the
version that was read (UpdateSecretVersionStage with RemoveFromVersionId fails when the label has moved
since: https://docs.aws.amazon.com/secretsmanager/latest/apireference/API_UpdateSecretVersionStage.html);
a writer that lost the race reads again and retries, with jittered backoff.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import random
import secrets
import sys
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field, RootModel
from pydantic.alias_generators import to_camel

from mcp_backend.aws import botocore_errors, new_client
from mcp_backend.lazy_imports import loaded_on_first_use
from mcp_backend.observability import logger
from mcp_backend.tiers import LOWEST_TIER, TIERS, Tier

# The command line (`python -m mcp_backend.api_keys`) is an operator's: the functions that read keys never parse
# one, so its parser loads with the first use, not with every cold start that imports this module.
if TYPE_CHECKING:
    import argparse
else:
    argparse = loaded_on_first_use("argparse")

if TYPE_CHECKING:
    from mypy_boto3_secretsmanager import SecretsManagerClient

API_KEY_PREFIX = "mcpk_"
CURRENT_STAGE = "AWSCURRENT"
# The label a new table version carries until AWSCURRENT moves to it (a version with no label may be
# deleted by Secrets Manager; AWSPENDING is left to rotation).
WRITE_STAGE = "KEYTABLE_WRITE"
# Each round of a race has one winner, so n writers at once need up to n rounds; with slow calls (a loaded
# host, a throttled API) a dozen rounds proved too few for 8 concurrent writers.
MAX_WRITE_ATTEMPTS = 30
# The error codes of a lost race: AWSCURRENT has moved from the version read, or the version just put was
# deprecated (its label taken by another writer) and deleted.
_RACE_LOST_CODES = frozenset({"InvalidParameterException", "InvalidRequestException", "ResourceNotFoundException"})


# Ids the stack itself uses: the owner of its own endpoint, and the self-probe's key. No issued key takes them.
RESERVED_USER_IDS = frozenset({"stack", "self-probe"})
# How a caller authenticated prefixes its user id, so an API-key user and a token subject of the same name are
# different principals: "apikey:<user id in the key table>", "oauth:<issuer>:<subject claim>".
API_KEY_NAMESPACE = "apikey:"
# A key table user id leaves room for its namespace within a principal's 128 characters.
MAX_KEY_USER_ID_CHARS = 128 - len(API_KEY_NAMESPACE)


class ReservedUserId(ValueError):
    """A key was asked for an id the stack reserves for itself, or one too long to namespace."""


class Principal(BaseModel):
    """The authenticated caller: the user id owns its jobs and endpoints, the tier sets its limits (quotas.py)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, frozen=True, extra="forbid")

    # `|` for token subjects such as Auth0's "auth0|5f..."; `/` and `:` for an issuer URL in a namespaced id.
    user_id: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.@:|/-]+$")
    tier: Tier = LOWEST_TIER

    def namespaced(self, namespace: str) -> Principal:
        """The same caller, its id prefixed by how it authenticated (validated again: at most 128 characters)."""
        return type(self).model_validate({**self.model_dump(), "user_id": namespace + self.user_id})


def key_table_principal(user_id: str, tier: str, *, allow_reserved: bool = False) -> Principal:
    """A key table entry for a new key: never a reserved id (the stack issues those itself)."""
    if user_id in RESERVED_USER_IDS and not allow_reserved:
        raise ReservedUserId(f"user id {user_id!r} is reserved for the stack itself")
    if len(user_id) > MAX_KEY_USER_ID_CHARS:
        raise ReservedUserId(f"a key's user id is at most {MAX_KEY_USER_ID_CHARS} characters")
    return Principal(user_id=user_id, tier=tier)  # type: ignore[arg-type]


class ApiKeyTable(RootModel[dict[str, Principal]]):
    """The secret's JSON: sha256 hex of each key -> its principal."""


class KeyTableContended(RuntimeError):
    """Other writers changed the key table on every attempt: this change was not made (run it again)."""


def hash_api_key(api_key: str) -> str:
    return hashlib.sha256(api_key.encode()).hexdigest()


def _generate_key() -> str:
    return API_KEY_PREFIX + secrets.token_urlsafe(32)


def new_api_key(user_id: str, tier: str = "free", existing_secret: str | None = None) -> tuple[str, str]:
    """A fresh key and the secret JSON with it added (rotation: add the new key, later remove the old hash).

    Returns (plaintext_key, secret_string). Show the key once; store only the secret string.
    """
    key = _generate_key()
    table = ApiKeyTable.model_validate_json(existing_secret) if existing_secret else ApiKeyTable({})
    entries = dict(table.root)
    entries[hash_api_key(key)] = key_table_principal(user_id, tier)
    return key, ApiKeyTable(entries).model_dump_json(by_alias=True)


class SecretReader:
    """Reads a secret string through the Parameters and Secrets extension, else through the SDK.

    The extension (localhost:2773, token = AWS_SESSION_TOKEN) caches for SECRETS_MANAGER_TTL; where
    its layer is absent (local stack, tests) the connection is refused and boto3 is used instead.
    """

    def __init__(
        self,
        secret_id: str,
        extension_port: int = 2773,
        client_factory: Callable[[], SecretsManagerClient] | None = None,
    ):
        self.secret_id = secret_id
        self.extension_port = extension_port
        self._client_factory = client_factory
        self._client: SecretsManagerClient | None = None
        self.extension_available = True

    def read(self, fresh: bool = False) -> str:
        """The secret's current value. fresh=True bypasses the extension, whose cache (SECRETS_MANAGER_TTL)
        would otherwise hide a key added since: the refresh after an unknown key must see new keys."""
        if not fresh and self.extension_available and os.environ.get("AWS_SESSION_TOKEN"):
            try:
                return self._read_through_extension()
            except OSError as error:  # urllib's URLError is an OSError; its reason holds the socket error
                reason = getattr(error, "reason", error)
                if getattr(reason, "errno", None) in (errno.ECONNREFUSED, errno.EADDRNOTAVAIL):
                    # Nothing listens on the port: no extension layer here. The SDK path is the fallback.
                    self.extension_available = False
                    logger.info("parameters and secrets extension not reachable; reading the secret with the SDK")
                else:  # a transient failure: this read falls back, the next tries the extension again
                    logger.warning(
                        "parameters and secrets extension read failed", extra={"error_type": type(error).__name__}
                    )
        # The stage named explicitly (AWS's default too): moto answers an unstaged read with the last version
        # PutSecretValue made current, not the one UpdateSecretVersionStage moved AWSCURRENT to.
        return self._sdk().get_secret_value(SecretId=self.secret_id, VersionStage=CURRENT_STAGE)["SecretString"]

    def forget_client(self) -> None:
        """Drop the cached SDK client (after a SnapStart restore it holds the snapshot's credentials)."""
        self._client = None

    def _read_through_extension(self) -> str:
        query = urllib.parse.quote(self.secret_id, safe="")
        request = urllib.request.Request(
            f"http://localhost:{self.extension_port}/secretsmanager/get?secretId={query}",
            headers={"X-Aws-Parameters-Secrets-Token": os.environ["AWS_SESSION_TOKEN"]},
        )
        with urllib.request.urlopen(request, timeout=2) as response:  # noqa: S310
            return json.loads(response.read())["SecretString"]

    def _sdk(self) -> SecretsManagerClient:
        if self._client is None:
            factory = self._client_factory or (lambda: new_client("secretsmanager"))
            self._client = factory()
        return self._client


def add_api_key(
    secrets_client: SecretsManagerClient,
    secret_id: str,
    user_id: str,
    tier: str = "free",
    *,
    allow_reserved: bool = False,
) -> str:
    """Store a new key's hash in the secret and return the plaintext key (the only copy). A reserved user id is
    refused unless the stack issues it itself (`allow_reserved`: the self-probe key issued at deploy)."""
    key = _generate_key()
    principal = key_table_principal(user_id, tier, allow_reserved=allow_reserved)
    _change_table(secrets_client, secret_id, lambda table: {**table, hash_api_key(key): principal})
    return key


def revoke_api_key(secrets_client: SecretsManagerClient, secret_id: str, key_hash: str) -> bool:
    found = False

    def without_key(table: dict[str, Principal]) -> dict[str, Principal] | None:
        nonlocal found
        found = key_hash in table
        return {digest: p for digest, p in table.items() if digest != key_hash} if found else None

    _change_table(secrets_client, secret_id, without_key)
    return found


def list_api_keys(secrets_client: SecretsManagerClient, secret_id: str) -> dict[str, Principal]:
    """Key hash -> principal, for every stored key."""
    return _read_table(secrets_client, secret_id)[1]


def _read_table(secrets_client: SecretsManagerClient, secret_id: str) -> tuple[str, dict[str, Principal]]:
    current = secrets_client.get_secret_value(SecretId=secret_id, VersionStage=CURRENT_STAGE)
    return current["VersionId"], ApiKeyTable.model_validate_json(current.get("SecretString") or "{}").root


def _change_table(
    secrets_client: SecretsManagerClient,
    secret_id: str,
    change: Callable[[dict[str, Principal]], dict[str, Principal] | None],
) -> None:
    """Apply `change` to the current table as a compare-and-swap (module docstring); None: nothing to write."""
    for attempt in range(MAX_WRITE_ATTEMPTS):
        read_version, table = _read_table(secrets_client, secret_id)
        updated = change(dict(table))
        if updated is None:
            return
        new_version = str(uuid.uuid4())
        secrets_client.put_secret_value(
            SecretId=secret_id,
            SecretString=ApiKeyTable(updated).model_dump_json(by_alias=True),
            ClientRequestToken=new_version,
            VersionStages=[WRITE_STAGE],
        )
        try:
            secrets_client.update_secret_version_stage(
                SecretId=secret_id,
                VersionStage=CURRENT_STAGE,
                MoveToVersionId=new_version,
                RemoveFromVersionId=read_version,
            )
            return
        except botocore_errors.ClientError as error:
            if _error_code(error) not in _RACE_LOST_CODES:
                raise
        time.sleep(random.uniform(0, min(1.0, 0.02 * 2**attempt)))  # noqa: S311 - jitter, not a secret
    raise KeyTableContended(f"the key table changed under this write {MAX_WRITE_ATTEMPTS} times")


def _error_code(error: Exception) -> str:
    response = getattr(error, "response", None)
    return str(response.get("Error", {}).get("Code", "")) if isinstance(response, dict) else ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mcp_backend.api_keys")
    parser.add_argument("action", choices=["add", "revoke", "list"])
    parser.add_argument("--secret-id", required=True)
    parser.add_argument("--user-id")
    parser.add_argument("--tier", default=LOWEST_TIER, choices=TIERS)
    parser.add_argument("--key-hash")
    args = parser.parse_args(argv)
    client = new_client("secretsmanager")
    if args.action == "add":
        if not args.user_id:
            parser.error("add needs --user-id")
        try:
            print(add_api_key(client, args.secret_id, args.user_id, args.tier))
        except ReservedUserId as refused:
            parser.error(str(refused))
        return 0
    if args.action == "revoke":
        if not args.key_hash:
            parser.error("revoke needs --key-hash")
        return 0 if revoke_api_key(client, args.secret_id, args.key_hash) else 1
    for digest, principal in list_api_keys(client, args.secret_id).items():
        print(f"{digest}  {principal.user_id}  {principal.tier}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
