"""Who is calling: bearer API keys kept hashed in Secrets Manager, behind a replaceable Authenticator.

The secret holds `{"<sha256 hex of key>": {"userId": ..., "tier": ...}}`, so neither the secret nor a
log line ever holds a usable key. An OAuth 2.1 resource-server mode (JWT audience check, RFC 9728
metadata) is another Authenticator: the HTTP guard only calls `authenticate` and `challenge`.
"""

from __future__ import annotations

import errno
import hashlib
import hmac
import json
import os
import secrets
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, RootModel, ValidationError
from pydantic.alias_generators import to_camel

from mcp_backend.aws import new_client
from mcp_backend.observability import logger

API_KEY_PREFIX = "mcpk_"


class Principal(BaseModel):
    """The authenticated caller: the user id goes into job records, the tier into traces."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, frozen=True, extra="forbid")

    user_id: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.@:-]+$")
    tier: Literal["free", "pro", "internal"] = "free"


class ApiKeyTable(RootModel[dict[str, Principal]]):
    """The secret's JSON: sha256 hex of each key -> its principal."""


class Authenticator(Protocol):
    async def authenticate(self, bearer_token: str) -> Principal | None:
        """The principal for a presented token, or None when it is not valid."""
        ...

    def challenge(self) -> str:
        """The WWW-Authenticate value sent with a 401."""
        ...


def hash_api_key(api_key: str) -> str:
    return hashlib.sha256(api_key.encode()).hexdigest()


def new_api_key(user_id: str, tier: str = "free", existing_secret: str | None = None) -> tuple[str, str]:
    """A fresh key and the secret JSON with it added (rotation: add the new key, later remove the old hash).

    Returns (plaintext_key, secret_string). Show the key once; store only the secret string.
    """
    key = API_KEY_PREFIX + secrets.token_urlsafe(32)
    table = ApiKeyTable.model_validate_json(existing_secret) if existing_secret else ApiKeyTable({})
    entries = dict(table.root)
    entries[hash_api_key(key)] = Principal(user_id=user_id, tier=tier)  # type: ignore[arg-type]
    return key, ApiKeyTable(entries).model_dump_json(by_alias=True)


class SecretReader:
    """Reads a secret string through the Parameters and Secrets extension, else through the SDK.

    The extension (localhost:2773, token = AWS_SESSION_TOKEN) caches for SECRETS_MANAGER_TTL; where
    its layer is absent (local stack, tests) the connection is refused and boto3 is used instead.
    """

    def __init__(self, secret_id: str, extension_port: int = 2773, client_factory: Callable[[], Any] | None = None):
        self.secret_id = secret_id
        self.extension_port = extension_port
        self._client_factory = client_factory
        self._client: Any = None
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
        return self._sdk().get_secret_value(SecretId=self.secret_id)["SecretString"]

    def _read_through_extension(self) -> str:
        query = urllib.parse.quote(self.secret_id, safe="")
        request = urllib.request.Request(
            f"http://localhost:{self.extension_port}/secretsmanager/get?secretId={query}",
            headers={"X-Aws-Parameters-Secrets-Token": os.environ["AWS_SESSION_TOKEN"]},
        )
        with urllib.request.urlopen(request, timeout=2) as response:  # noqa: S310
            return json.loads(response.read())["SecretString"]

    def _sdk(self) -> Any:
        if self._client is None:
            factory = self._client_factory or (lambda: new_client("secretsmanager"))
            self._client = factory()
        return self._client


class KeyTableUnavailable(RuntimeError):
    """No key table could be read (and none is cached): the guard answers 503, not 401 or 500."""


class ApiKeyAuthenticator:
    """Bearer API keys checked against the hashed table, cached for `cache_seconds`.

    The presented key is hashed and compared with every stored hash in constant time, so timing says
    nothing about how close a guess was. An unknown key triggers at most one refresh per cache period
    (a key added during rotation works without a cold start; a flood of bad keys does not hammer the secret).
    """

    def __init__(self, reader: SecretReader, cache_seconds: float = 300.0) -> None:
        self.reader = reader
        self.cache_seconds = cache_seconds
        self._table: dict[str, Principal] = {}
        self._loaded_at = float("-inf")
        self._lock = threading.Lock()

    async def authenticate(self, bearer_token: str) -> Principal | None:
        import anyio.to_thread

        if not bearer_token.startswith(API_KEY_PREFIX) or len(bearer_token) > 256:
            return None
        digest = hash_api_key(bearer_token)
        table = await anyio.to_thread.run_sync(self._current_table, False)
        found = _lookup(table, digest)
        if found is None and time.monotonic() - self._loaded_at > min(self.cache_seconds, 30.0):
            found = _lookup(await anyio.to_thread.run_sync(self._current_table, True), digest)
        return found

    def challenge(self) -> str:
        return 'Bearer realm="mcp", error="invalid_token"'

    def _current_table(self, force: bool) -> dict[str, Principal]:
        with self._lock:
            if force or time.monotonic() - self._loaded_at > self.cache_seconds:
                try:
                    self._table = ApiKeyTable.model_validate_json(self.reader.read(fresh=force)).root
                except ValidationError:
                    # Keep serving the last good table; the message names no key material.
                    logger.error("API key secret is not a valid key table; keeping the previous one")
                except Exception as error:
                    if not self._table:
                        raise KeyTableUnavailable("the API key table cannot be read") from error
                    # A transient read failure: keep serving the last good table until the next period.
                    logger.error(
                        "API key secret not readable; keeping the previous table",
                        extra={"error_type": type(error).__name__},
                    )
                self._loaded_at = time.monotonic()
            return self._table


def _lookup(table: dict[str, Principal], digest: str) -> Principal | None:
    found = None
    for stored, principal in table.items():
        if hmac.compare_digest(stored, digest):
            found = principal
    return found
