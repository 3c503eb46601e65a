"""Who is calling: bearer API keys checked against the hashed key table (mcp_backend.api_keys), behind a
replaceable Authenticator. The OAuth 2.1 resource-server mode (mcp_backend.mcp.oauth) is another
Authenticator: the HTTP guard only calls the protocol below.
"""

from __future__ import annotations

import hmac
import threading
import time
from contextvars import ContextVar
from typing import Any, Protocol

import anyio.to_thread
from pydantic import ConfigDict, ValidationError

from mcp_backend.api_keys import (
    API_KEY_NAMESPACE,
    API_KEY_PREFIX,
    ApiKeyTable,
    Principal,
    SecretReader,
    hash_api_key,
)
from mcp_backend.observability import logger
from mcp_backend.refusals import AuthenticationUnavailable

# Who is calling, for everything the request runs after the guard authenticated it (the SDK's handlers included:
# their tasks start in the request's context), as the SDK's own `auth_context_var`. Set by the guard for the
# request's serving only; None outside a request.
CALLER: ContextVar[Principal | None] = ContextVar("mcp_backend_caller", default=None)


def current_caller() -> Principal | None:
    return CALLER.get()


class Authenticator(Protocol):
    async def authenticate(self, bearer_token: str, resource: str) -> Principal | None:
        """The principal for a presented token, or None when it is not valid (for `resource`, this endpoint's URL)."""
        ...

    def challenge(self, resource: str, token_presented: bool) -> str:
        """The WWW-Authenticate value sent with a 401."""
        ...

    def metadata(self, resource: str) -> dict[str, Any] | None:
        """The RFC 9728 Protected Resource Metadata, or None when the endpoint is not an OAuth resource."""
        ...

    def insufficient_scope(self, resource: str, scope: str) -> str:
        """The WWW-Authenticate value sent with a 403 when the caller's token lacks `scope` (an Access value)."""
        ...


class ScopedPrincipal(Principal):
    """A caller authenticated by an access token: only the tools its scopes allow (Access values)."""

    model_config = ConfigDict(defer_build=True)  # built with the first access token (API keys never need it)

    access: frozenset[str] = frozenset()


class KeyTableUnavailable(AuthenticationUnavailable):
    """No key table could be read (and none is cached)."""


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
        self._bypass_cache = False  # after a restore: the next read skips the extension's (restored) cache
        self._lock = threading.Lock()

    async def authenticate(self, bearer_token: str, resource: str = "") -> Principal | None:
        if not bearer_token.startswith(API_KEY_PREFIX) or len(bearer_token) > 256:
            return None
        digest = hash_api_key(bearer_token)
        # A fresh cached table is read on the event loop; only a read of the secret goes to a thread.
        fresh = self._table and time.monotonic() - self._loaded_at <= self.cache_seconds
        table = self._table if fresh else await anyio.to_thread.run_sync(self._current_table, False)
        found = _lookup(table, digest)
        if found is None and time.monotonic() - self._loaded_at > min(self.cache_seconds, 30.0):
            found = _lookup(await anyio.to_thread.run_sync(self._current_table, True), digest)
        return found

    def challenge(self, resource: str = "", token_presented: bool = True) -> str:
        return 'Bearer realm="mcp", error="invalid_token"'

    def metadata(self, resource: str) -> dict[str, Any] | None:
        return None

    def insufficient_scope(self, resource: str, scope: str) -> str:
        return self.challenge()  # API keys carry every scope: never asked

    def reload_after_restore(self) -> None:
        """After a SnapStart restore: the snapshot's table and secrets client are dropped, and the first request
        reads the table from Secrets Manager itself (the extension's cache came back with the snapshot too), so a
        key revoked since the snapshot is refused at once."""
        with self._lock:
            self._table, self._loaded_at, self._bypass_cache = {}, float("-inf"), True
            forget_client = getattr(self.reader, "forget_client", None)
            if forget_client is not None:
                forget_client()

    def _current_table(self, force: bool) -> dict[str, Principal]:
        with self._lock:
            if force or time.monotonic() - self._loaded_at > self.cache_seconds:
                try:
                    secret = self.reader.read(fresh=force or self._bypass_cache)
                    self._table = _namespaced(ApiKeyTable.model_validate_json(secret).root)
                    self._bypass_cache = False
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


def _namespaced(table: dict[str, Principal]) -> dict[str, Principal]:
    """The table's callers as they act: ids prefixed with the API-key namespace, once per read of the table. An
    entry written before ids were namespaced, too long to carry the namespace, is left out (its key is refused)."""
    callers = {}
    for digest, principal in table.items():
        try:
            callers[digest] = principal.namespaced(API_KEY_NAMESPACE)
        except ValidationError:
            continue
    return callers


def _lookup(table: dict[str, Principal], digest: str) -> Principal | None:
    found = None
    for stored, principal in table.items():
        if hmac.compare_digest(stored, digest):
            found = principal
    return found
