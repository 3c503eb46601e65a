"""Which clients may ask for tokens: redirect URIs a registration may name (RFC 7591 with RFC 8252's loopback
rule), and client ID metadata documents (an https `client_id` whose URL serves the client's metadata).

A redirect URI is https, or http on a loopback host (RFC 8252 section 7.3: native apps listen on
127.0.0.1, [::1] or localhost); never a fragment or user info. A request's redirect URI must equal a
registered one, except that a loopback http one may name any port (RFC 8252 section 7.3: the port is the
app's, picked when it asks); host, path and query still match exactly, so `localhost` never stands in for
`127.0.0.1` or the other way round. An https redirect's host must be on the allow-list of redirect hosts
(the template's default: the hosted clients'; empty: none), so a registration cannot send the consent's answer
to a look-alike host. Loopback stays allowed: it only ever reaches the user's own machine.
A private-use scheme URI (RFC 8252 section 7.1, e.g. Cursor's) only when listed, exactly.

A metadata document is fetched through the project's network-safety rules (https, every resolved address
public, the connection pinned to the checked addresses, no redirects), read up to `MAX_DOCUMENT_BYTES`, and
must be JSON client metadata naming the same `client_id` with redirect URIs allowed above, each https one on
the `client_id`'s own host (refused otherwise, not warned: the consent page shows the document's host as the
client's, and a document on one host sending codes to another would make that line false). It is public
(`token_endpoint_auth_method` none): a document cannot carry a secret. Documents are cached per process for
`CACHE_SECONDS`; a refused or unreachable one is remembered, with the reason, for `FAILURE_CACHE_SECONDS`, so
a failing host costs one fetch per instance and window. Fetches (not cached answers) are limited per source
address and per document host (fetch_limits.py): over a limit, nothing is fetched and nothing cached.

An operator's client (`python -m mcp_backend.authorization clients add`) has an `op-` id, fixed redirect URIs
and never expires; a confidential one gets a secret, shown once and stored by its sha256 only.

Scopes: a client is only ever granted scopes this server knows (`SCOPES`), whatever its registration or
document lists; the rest are ignored (RFC 6749 section 3.3), and a request left with none is `invalid_scope`.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import threading
import time
import urllib.parse
from collections.abc import Awaitable, Callable
from typing import Any

import httpx2
from mcp.shared.auth import (
    InvalidRedirectUriError,
    InvalidScopeError,
    OAuthClientInformationFull,
    OAuthClientMetadata,
)
from pydantic import AnyUrl, ValidationError

from mcp_backend.netsafety import MAX_ENDPOINT_URL_LENGTH, UnsafeUrl, is_loopback_host, resolve_endpoint
from mcp_backend.observability import logger
from mcp_backend.pinned_transport import PinnedTransport

MAX_DOCUMENT_BYTES = 8 * 1024
CACHE_SECONDS = 300.0
FAILURE_CACHE_SECONDS = 60.0
FETCH_TIMEOUT_SECONDS = 3.0
# What this server grants: the endpoint's tools need one or the other (mcp_backend.tools.table.Access; a test
# keeps the two equal, the tool table itself is too heavy to load here).
SCOPES = ("read", "submit")
UNREACHABLE = "the client metadata document could not be fetched"


class RejectedClient(ValueError):
    """Metadata (registered or fetched) this server refuses; the message names the fault, never a secret."""


def check_redirect_uris(uris: list[str], allowed_hosts: tuple[str, ...], native: tuple[str, ...] = ()) -> None:
    if not uris:
        raise RejectedClient("redirect_uris must name at least one URI")
    for uri in uris:
        if uri in native:
            continue  # a listed private-use redirect, matched exactly
        parts = urllib.parse.urlsplit(uri)
        host = parts.hostname or ""
        if parts.fragment or parts.username or parts.password or not host:
            raise RejectedClient("a redirect URI must have a host and no fragment or user info")
        if parts.scheme == "http" and is_loopback_host(host):
            continue
        if parts.scheme != "https":
            raise RejectedClient("a redirect URI must be https, or http on a loopback host (RFC 8252)")
        if host.lower() not in allowed_hosts:
            raise RejectedClient("the redirect URI's host is not on this server's allow-list")


def redirect_matches(registered: str, requested: str) -> bool:
    """Exactly equal, or both loopback http with the same host, path and query on any port (RFC 8252 7.3)."""
    if registered == requested:
        return True
    want, got = urllib.parse.urlsplit(registered), urllib.parse.urlsplit(requested)
    host = got.hostname or ""
    return (
        want.scheme == got.scheme == "http"
        and is_loopback_host(host)
        and want.hostname == host
        and not (want.username or want.password or got.username or got.password or got.fragment)
        and (want.path or "/") == (got.path or "/")
        and want.query == got.query
    )


def known_scopes(scope: str | None) -> list[str]:
    """The scopes of a space-separated list this server knows, in order, once each."""
    return [name for name in dict.fromkeys((scope or "").split()) if name in SCOPES]


class Client(OAuthClientInformationFull):
    """A registered or document client, with this server's redirect and scope rules (module docstring)."""

    def validate_redirect_uri(self, redirect_uri: AnyUrl | None) -> AnyUrl:
        if redirect_uri is None:
            return super().validate_redirect_uri(None)
        if any(redirect_matches(str(uri), str(redirect_uri)) for uri in self.redirect_uris or []):
            return redirect_uri
        raise InvalidRedirectUriError("redirect_uri is not registered for this client")

    def validate_scope(self, requested_scope: str | None) -> list[str] | None:
        allowed = known_scopes(self.scope)
        granted = allowed if requested_scope is None else [s for s in known_scopes(requested_scope) if s in allowed]
        if not granted:
            raise InvalidScopeError(f"no requested scope is one this server grants this client ({' '.join(allowed)})")
        return granted


OPERATOR_PREFIX = "op-"  # registration ids are the SDK's UUIDs: an operator's client never looks like one


def operator_client(name: str, redirect_uris: list[str], auth_method: str) -> tuple[Client, str | None]:
    """A new operator's client and its secret (None for a public client, auth_method `none`); the client holds
    the secret's sha256 only. RejectedClient for a redirect URI no client may register."""
    check_redirect_uris(redirect_uris, ())
    secret = None if auth_method == "none" else secrets.token_urlsafe(32)
    client = Client.model_validate(
        {
            "client_id": f"{OPERATOR_PREFIX}{secrets.token_urlsafe(16)}",
            "client_name": name,
            "redirect_uris": redirect_uris,
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "scope": " ".join(SCOPES),
            "token_endpoint_auth_method": auth_method,
            "client_secret": hashed_secret(secret) if secret else None,
            "client_id_issued_at": int(time.time()),
        }
    )
    return client, secret


def hashed_secret(secret: str) -> str:
    """What the table keeps of a client secret, and what a presented one is compared as (app.HashedSecrets)."""
    return hashlib.sha256(secret.encode()).hexdigest()


def host_of(url: str) -> str:
    """A URL's host, lower-cased ("" when it has none or cannot be read: the fetch then refuses the URL)."""
    try:
        return (urllib.parse.urlsplit(url).hostname or "").lower()
    except ValueError:
        return ""


def is_metadata_url(client_id: str) -> bool:
    """A client ID metadata document URL: https with a path (the spec's form), not a registered client's id."""
    return client_id.startswith("https://") or client_id.startswith("http://")


Fetch = Callable[[str], Awaitable[bytes]]
# Counts one fetch of a document on the given host; raises FetchLimited when it may not be made.
Admit = Callable[[str], Awaitable[None]]


class FetchLimited(Exception):
    """A document fetch over a limit: `retry_after` seconds until its window ends; the message names the limit."""

    def __init__(self, limit: str, retry_after: int) -> None:
        super().__init__(f"too many client metadata document fetches {limit}; retry later")
        self.retry_after = retry_after


class MetadataDocuments:
    """Client ID metadata documents, fetched safely and cached (see the module docstring)."""

    def __init__(
        self,
        allowed_hosts: tuple[str, ...],
        *,
        native_redirect_uris: tuple[str, ...] = (),
        allow_loopback_hosts: bool = False,
        fetch: Fetch | None = None,
        admit: Admit | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """admit: counts each fetch against the fetch limits (None: unlimited, as in a one-off lookup)."""
        self.allowed_hosts = allowed_hosts
        self.native_redirect_uris = native_redirect_uris
        self.allow_loopback_hosts = allow_loopback_hosts
        self.fetch = fetch or self._fetch
        self.admit = admit
        self.clock = clock
        # url -> (until, the client or None, why it was refused)
        self._cache: dict[str, tuple[float, Client | None, str]] = {}
        self._lock = threading.Lock()

    async def client(self, url: str) -> Client | None:
        """The document's client, or None when it cannot be had or is refused (the MCP SDK's handlers then answer
        as for an unknown client). FetchLimited when it may not be fetched now: the app answers that itself (429
        with Retry-After), so a client is never told its credentials are invalid for a limit it can wait out."""
        return (await self.lookup(url))[0]

    async def lookup(self, url: str) -> tuple[Client | None, str]:
        """The document's client and "", or None and the short reason it was refused (cached either way).
        FetchLimited when it is not cached and a fetch limit refuses fetching it (nothing cached then)."""
        now = self.clock()
        with self._lock:
            cached = self._cache.get(url)
        if cached is not None and cached[0] > now:
            return cached[1], cached[2]
        if self.admit is not None:
            await self.admit(host_of(url))
        found: Client | None = None
        reason, lifetime = "", CACHE_SECONDS
        try:
            found = self.parse(url, await self.fetch(url))
        except Exception as error:  # noqa: BLE001 - any fault of another party's host is a refusal, never a 500
            if isinstance(error, RejectedClient):
                reason = str(error)
            elif isinstance(error, UnsafeUrl):
                reason = "the client_id URL is not a public https URL"
            else:
                reason = UNREACHABLE
            lifetime = FAILURE_CACHE_SECONDS
            logger.info("client metadata document refused", extra={"reason": type(error).__name__})
        with self._lock:
            if len(self._cache) > 1000:  # many distinct URLs: forget them all rather than grow without bound
                self._cache.clear()
            self._cache[url] = (now + lifetime, found, reason)
        return found, reason

    def parse(self, url: str, body: bytes) -> Client:
        if len(body) > MAX_DOCUMENT_BYTES:
            raise RejectedClient("the client metadata document is too large")
        try:
            document: Any = json.loads(body)
        except ValueError:
            raise RejectedClient("the client metadata document is not JSON") from None
        if not isinstance(document, dict) or document.get("client_id") != url:
            raise RejectedClient("the client metadata document names another client_id")
        if document.get("token_endpoint_auth_method", "none") != "none" or "client_secret" in document:
            raise RejectedClient("a client metadata document describes a public client (no secret)")
        try:
            metadata = OAuthClientMetadata.model_validate({k: v for k, v in document.items() if k != "client_id"})
        except ValidationError:
            raise RejectedClient("the client metadata document is not valid client metadata") from None
        uris = [str(uri) for uri in metadata.redirect_uris or []]
        check_redirect_uris(uris, self.allowed_hosts, self.native_redirect_uris)
        own_host = (urllib.parse.urlsplit(url).hostname or "").lower()
        for uri in uris:
            parts = urllib.parse.urlsplit(uri)
            if parts.scheme == "https" and (parts.hostname or "").lower() != own_host:
                raise RejectedClient("a redirect URI's host is not the client_id's host")
        # A document without `scope` may ask for every scope (registration defaults the same way); one that
        # lists scopes keeps those this server knows (Client.validate_scope applies the same rule).
        return Client.model_validate(
            {
                **metadata.model_dump(),
                "client_id": url,
                "token_endpoint_auth_method": "none",
                "scope": " ".join(known_scopes(metadata.scope)) if metadata.scope else " ".join(SCOPES),
            }
        )

    async def _fetch(self, url: str) -> bytes:
        if len(url) > MAX_ENDPOINT_URL_LENGTH:
            raise RejectedClient("the client_id URL is too long")
        parts, addresses = resolve_endpoint(url, allow_loopback_hosts=self.allow_loopback_hosts)
        if not parts.path.strip("/"):
            raise RejectedClient("a client_id URL needs a path")
        transport = PinnedTransport(url, tuple(addresses), max_response_bytes=MAX_DOCUMENT_BYTES)
        async with httpx2.AsyncClient(
            transport=transport, timeout=FETCH_TIMEOUT_SECONDS, follow_redirects=False, trust_env=False
        ) as client:
            response = await client.get(url, headers={"accept": "application/json"})
        if response.status_code != 200:
            raise RejectedClient(f"{UNREACHABLE} (HTTP {response.status_code})")
        return response.content
