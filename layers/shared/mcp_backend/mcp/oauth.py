"""OAuth 2.1 resource-server mode: bearer JWT access tokens from one authorization server, checked with
PyJWT against the issuer's JWKS, plus the RFC 9728 Protected Resource Metadata that tells MCP clients
where to get one.

A token is accepted when, in this order: its header's `alg` is in the allow-list (asymmetric only, so
`none` and HS* never verify); its `kid` is in the JWKS (an unknown kid refreshes the JWKS at most once
per refresh interval); the signature verifies; `iss` is the issuer; `exp`/`nbf` hold within the leeway;
`token_use`, when present, is "access"; and it was issued for this resource: `aud` holds this resource's
configured URL (RFC 8707; OAUTH_RESOURCE, never the request's Host) or a configured extra audience, or, for
issuers whose access tokens carry no `aud` (Cognito), `client_id` is in the allow-list and a scope carries
this resource server's prefix.
The caller's user id is "oauth:<issuer>:<the configured claim>" (`sub` by default; API-key callers are
"apikey:<id>"); its scopes decide which tools it may call.

A JWKS that cannot be fetched (a wrong issuer, a network failure) is not the caller's fault: 503 with
Retry-After, logged once per refresh interval. No token, claim value or key material is ever logged.
"""

from __future__ import annotations

import functools
import hmac
import http.client
import json
import math
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, get_args

from mcp.shared.auth import ProtectedResourceMetadata
from pydantic import ValidationError

from mcp_backend.api_keys import API_KEY_PREFIX, Principal
from mcp_backend.config import McpSettings
from mcp_backend.mcp.auth import AuthenticationUnavailable, Authenticator, ScopedPrincipal
from mcp_backend.mcp.scopes import METADATA_PATH
from mcp_backend.mcp.worker_threads import run_in_worker_thread
from mcp_backend.netsafety import DeadlinePassed, OutboundDeadline, is_loopback_host
from mcp_backend.observability import logger
from mcp_backend.tiers import LOWEST_TIER, Tier
from mcp_backend.tools.table import Access

if TYPE_CHECKING:
    import jwt

MAX_TOKEN_CHARS = 8192
_KEY_FAMILIES = {"RSA": ("RS", "PS"), "EC": ("ES",), "OKP": ("EdDSA",)}
Fetch = Callable[[str], bytes]


class JwksUnavailable(AuthenticationUnavailable):
    """The issuer's keys cannot be fetched (and none are cached, or the token's kid is not among them)."""

    logged = True  # JwksCache logs the cause once per refresh interval


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A redirect is an error: the scheme check above holds for the one URL fetched (no https -> http hop)."""

    def redirect_request(self, req: Any, fp: Any, code: int, msg: str, headers: Any, newurl: str) -> None:
        raise urllib.error.HTTPError(req.full_url, code, f"{code} redirects are not followed", headers, fp)


class _WatchedConnection(http.client.HTTPConnection):
    """A connection under the fetch's deadline: once connected, its socket's timeout is the time left (for the
    TLS handshake and each read), and the watchdog holds its descriptor to shut it when the time is up."""

    deadline: OutboundDeadline

    def connect(self) -> None:
        super().connect()
        self.sock.settimeout(self.deadline.timeout())
        self.deadline.hold(self.sock)


class _WatchedHTTPSConnection(http.client.HTTPSConnection, _WatchedConnection):
    """HTTPSConnection's TLS over the connection _WatchedConnection makes (it comes next in the MRO)."""


class _WatchedHandler(urllib.request.HTTPHandler, urllib.request.HTTPSHandler):
    """urllib's http and https handlers, opening watched connections."""

    def __init__(self, deadline: OutboundDeadline) -> None:
        super().__init__()
        self.deadline = deadline

    def _connection(self, kind: type[_WatchedConnection], host: str, **kwargs: Any) -> _WatchedConnection:
        connection = kind(host, **kwargs)
        connection.deadline = self.deadline
        return connection

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(functools.partial(self._connection, _WatchedConnection), req)

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        connection = functools.partial(self._connection, _WatchedHTTPSConnection)
        return self.do_open(connection, req, context=_tls_context())


@functools.cache
def _tls_context() -> ssl.SSLContext:
    return ssl.create_default_context()


def fetch_url(url: str, timeout: float = 3.0) -> bytes:
    """GET a JSON document from the authorization server: https only (plain http only on loopback), no redirects.

    `timeout` bounds the whole fetch (netsafety.OutboundDeadline): connect, TLS, headers and body draw from it,
    and at zero the connection is closed (DeadlinePassed, a TimeoutError)."""
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme != "https" and not (parsed.scheme == "http" and is_loopback_host(parsed.hostname or "")):
        raise ValueError("the issuer's URLs must be https")
    request = urllib.request.Request(url, headers={"accept": "application/json"})  # noqa: S310 - checked above
    with OutboundDeadline(timeout) as deadline:
        opener = urllib.request.build_opener(_NoRedirects, _WatchedHandler(deadline))
        try:
            with opener.open(request, timeout=deadline.timeout(timeout)) as response:
                body = bytes(response.read(1024 * 1024))
        except (OSError, http.client.HTTPException):
            if deadline.expired:
                raise DeadlinePassed(deadline.message) from None
            raise
        if deadline.cut:  # a body that ends with its connection: the watchdog's cut is no end
            raise DeadlinePassed(deadline.message)
        return body


@dataclass(frozen=True)
class SigningKey:
    jwk: jwt.PyJWK
    declared_algorithm: str | None  # the JWK's own `alg`, when it names one


class JwksCache:
    """The issuer's signing keys by kid: cached for `cache_seconds`, fetched at most once per `refresh_seconds`.

    An unknown kid triggers one refresh (keys rotate), but a flood of made-up kids triggers at most one
    fetch per interval. A failed refresh keeps serving the keys already held; with none held, or for an
    unknown kid, the failure is JwksUnavailable (503). The cause is logged once per interval.
    """

    def __init__(
        self,
        issuer: str,
        jwks_url: str = "",
        fetch: Fetch = fetch_url,
        cache_seconds: float = 3600.0,
        refresh_seconds: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.issuer = issuer
        self.jwks_url = jwks_url
        self.fetch = fetch
        self.cache_seconds = cache_seconds
        self.refresh_seconds = refresh_seconds
        self.clock = clock
        self._keys: dict[str, SigningKey] | None = None
        self._fetched_at = float("-inf")
        self._attempted_at = float("-inf")
        self._lock = threading.Lock()

    def key_for(self, kid: str) -> SigningKey | None:
        # The lock guards the cache's state only: the fetch runs outside it, so a slow issuer never holds up
        # requests whose keys are cached. A fetch is claimed (attempted_at) under the lock: one per interval.
        with self._lock:
            now = self.clock()
            keys = self._keys
            # Stale keys, or an unknown kid (a rotated key): fetch, at most once per refresh interval.
            wanted = keys is None or now - self._fetched_at > self.cache_seconds or kid not in keys
            fetching = wanted and now - self._attempted_at >= self.refresh_seconds
            if fetching:
                self._attempted_at = now
        if fetching:
            try:
                loaded = self._load()
            except Exception as error:
                # Logged here, at most once per refresh interval, never per request; the type only, no URL contents.
                logger.error("OAuth issuer keys unavailable", extra={"error_type": type(error).__name__})
                with self._lock:
                    keys = self._keys
                    if keys is None or kid not in keys:
                        raise JwksUnavailable("the issuer's keys are unavailable", self._retry_after(now)) from error
                    return keys[kid]  # keep serving the keys held
            with self._lock:
                self._keys, self._fetched_at = loaded, now
                keys = loaded
        if keys is None:
            raise JwksUnavailable("the issuer's keys are unavailable", self._retry_after(now))
        return keys.get(kid)

    def _retry_after(self, now: float) -> int:
        return max(1, math.ceil(self._attempted_at + self.refresh_seconds - now))

    def _load(self) -> dict[str, SigningKey]:
        # pyjwt and cryptography load with the first OAuth token, not with the app (API keys need neither).
        import jwt

        if not self.jwks_url:
            discovery = json.loads(self.fetch(self.issuer.rstrip("/") + "/.well-known/openid-configuration"))
            if discovery.get("issuer") != self.issuer or not isinstance(discovery.get("jwks_uri"), str):
                raise ValueError("the discovery document names another issuer or no jwks_uri")
            self.jwks_url = discovery["jwks_uri"]
        document = json.loads(self.fetch(self.jwks_url))
        keys: dict[str, SigningKey] = {}
        for entry in document.get("keys", []):
            if not isinstance(entry, dict) or entry.get("use", "sig") != "sig" or not entry.get("kid"):
                continue
            try:
                alg = entry.get("alg")
                keys[str(entry["kid"])] = SigningKey(jwt.PyJWK.from_dict(entry), alg if isinstance(alg, str) else None)
            except jwt.PyJWTError:
                continue  # a key type this process cannot use; the others still work
        return keys


class TokenRejected(Exception):
    """Why a token was refused: a short reason for the log, never the token or a claim value."""


@dataclass(frozen=True)
class TokenPolicy:
    issuer: str
    algorithms: frozenset[str]
    audiences: tuple[str, ...] = ()  # accepted besides the resource URL
    client_ids: tuple[str, ...] = ()  # tokens without `aud` (Cognito): these clients only
    scope_prefix: str = ""
    user_claim: str = "sub"
    leeway_seconds: float = 30.0
    # The claim naming the caller's tier; set only for an issuer whose tiers this stack trusts (its own
    # authorization server). Empty, or a value that is no tier: free.
    tier_claim: str = ""

    @classmethod
    def from_settings(cls, settings: McpSettings) -> TokenPolicy:
        return cls(
            issuer=settings.oauth_issuer,
            algorithms=frozenset(settings.oauth_list("algorithms")),
            audiences=tuple(settings.oauth_list("audiences")),
            client_ids=tuple(settings.oauth_list("client_ids")),
            scope_prefix=settings.oauth_scope_prefix,
            user_claim=settings.oauth_user_claim,
            leeway_seconds=settings.oauth_leeway_seconds,
            tier_claim=settings.oauth_tier_claim,
        )

    def scope(self, access: Access | str) -> str:
        return f"{self.scope_prefix}{Access(access).value}"


class OAuthAuthenticator:
    """Bearer JWT access tokens for this resource (see the module docstring for every check)."""

    def __init__(self, policy: TokenPolicy, jwks: JwksCache) -> None:
        self.policy = policy
        self.jwks = jwks

    @classmethod
    def from_settings(cls, settings: McpSettings, fetch: Fetch = fetch_url) -> OAuthAuthenticator:
        jwks = JwksCache(
            settings.oauth_issuer,
            settings.oauth_jwks_url,
            fetch,
            cache_seconds=settings.oauth_jwks_cache_seconds,
            refresh_seconds=settings.oauth_jwks_refresh_seconds,
        )
        return cls(TokenPolicy.from_settings(settings), jwks)

    async def authenticate(self, bearer_token: str, resource: str) -> Principal | None:
        try:
            return await run_in_worker_thread(self.verify, bearer_token, resource)
        except TokenRejected as reason:
            logger.info("access token rejected", extra={"reason": str(reason)})
            return None

    # Complexity exception: each claim check is one branch that names its own rejection reason.
    def verify(self, token: str, resource: str) -> ScopedPrincipal:  # noqa: C901
        """The principal of a valid token; TokenRejected otherwise, JwksUnavailable when keys cannot be had."""
        import jwt

        if len(token) > MAX_TOKEN_CHARS:
            raise TokenRejected("too long")
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise TokenRejected("not a JWT") from None
        algorithm, kid = header.get("alg"), header.get("kid")
        # A header is attacker-chosen JSON: an `alg` that is a list or object is just a bad token.
        if not isinstance(algorithm, str) or algorithm not in self.policy.algorithms:
            raise TokenRejected("algorithm not allowed")
        if not isinstance(kid, str):
            raise TokenRejected("no kid")
        key = self.jwks.key_for(kid)
        if key is None:
            raise TokenRejected("unknown kid")
        family = _KEY_FAMILIES.get(key.jwk.key_type or "", ())
        if not family or not str(algorithm).startswith(family) or key.declared_algorithm not in (None, algorithm):
            raise TokenRejected("algorithm does not match the key")
        try:
            claims = jwt.decode(
                token,
                key.jwk.key,
                algorithms=[algorithm],
                issuer=self.policy.issuer,
                leeway=self.policy.leeway_seconds,
                options={"require": ["exp", "iss"], "verify_aud": False},  # the audience is checked below
            )
        except jwt.ExpiredSignatureError:
            raise TokenRejected("expired") from None
        except jwt.ImmatureSignatureError:
            raise TokenRejected("not yet valid") from None
        except jwt.InvalidIssuerError:
            raise TokenRejected("wrong issuer") from None
        except jwt.InvalidSignatureError:
            raise TokenRejected("bad signature") from None
        except jwt.PyJWTError as error:
            raise TokenRejected(type(error).__name__) from None
        if claims.get("token_use", "access") != "access":
            raise TokenRejected("not an access token")
        scopes = _scopes(claims)
        self._check_audience(claims, scopes, resource)
        subject = claims.get(self.policy.user_claim)
        if not isinstance(subject, str) or not subject:
            raise TokenRejected("user claim missing or not a string")
        try:
            return ScopedPrincipal(
                # Namespaced by issuer: never the same principal as an API-key user, or another issuer's subject.
                user_id=f"oauth:{self.policy.issuer}:{subject}",
                access=frozenset(access.value for access in Access if self.policy.scope(access) in scopes),
                tier=self._tier(claims),
            )
        except ValidationError:
            raise TokenRejected("user claim missing or not a valid user id") from None

    def _tier(self, claims: dict[str, Any]) -> Tier:
        tier = claims.get(self.policy.tier_claim) if self.policy.tier_claim else None
        return next((known for known in get_args(Tier) if known == tier), LOWEST_TIER)

    def _check_audience(self, claims: dict[str, Any], scopes: set[str], resource: str) -> None:
        """`resource` is the configured one (OAUTH_RESOURCE), never derived from the request: empty, only the
        configured extra audiences (or, without `aud`, the allowed clients) bind a token to this endpoint."""
        audience = claims.get("aud")
        if audience is not None:
            audiences = [audience] if isinstance(audience, str) else audience
            accepted = tuple(a for a in (resource, *self.policy.audiences) if a)
            if not isinstance(audiences, list) or not any(_same(a, b) for a in audiences for b in accepted):
                raise TokenRejected("wrong audience")
            return
        # No `aud` (Cognito access tokens): an allow-listed client and a scope of this resource server.
        client_id = claims.get("client_id")
        if not isinstance(client_id, str) or not any(_same(client_id, c) for c in self.policy.client_ids):
            raise TokenRejected("no audience and client not allowed")
        if not self.policy.scope_prefix or not any(s.startswith(self.policy.scope_prefix) for s in scopes):
            raise TokenRejected("no audience and no scope of this resource server")

    def challenge(self, resource: str, token_presented: bool) -> str:
        # RFC 6750 section 3: no error code when the request carried no token.
        error = 'error="invalid_token", ' if token_presented else ""
        return f'Bearer {error}resource_metadata="{metadata_url(resource)}"'

    def insufficient_scope(self, resource: str, scope: str) -> str:
        return (
            f'Bearer error="insufficient_scope", scope="{self.policy.scope(scope)}", '
            f'resource_metadata="{metadata_url(resource)}"'
        )

    def metadata(self, resource: str) -> dict[str, Any]:
        document = ProtectedResourceMetadata.model_validate(
            {
                "resource": resource,
                "authorization_servers": [self.policy.issuer],
                "scopes_supported": [self.policy.scope(access) for access in Access],
                "bearer_methods_supported": ["header"],  # never the query string or a form body
                "resource_name": "MCP endpoint",
            }
        )
        return document.model_dump(mode="json", exclude_none=True)


class EitherAuthenticator:
    """AuthMode both: an API key (by its prefix) or an access token; challenges and metadata are OAuth's."""

    def __init__(self, api_keys: Authenticator, oauth: OAuthAuthenticator) -> None:
        self.api_keys = api_keys
        self.oauth = oauth

    async def authenticate(self, bearer_token: str, resource: str) -> Principal | None:
        chosen = self.api_keys if bearer_token.startswith(API_KEY_PREFIX) else self.oauth
        return await chosen.authenticate(bearer_token, resource)

    def challenge(self, resource: str, token_presented: bool) -> str:
        return self.oauth.challenge(resource, token_presented)

    def insufficient_scope(self, resource: str, scope: str) -> str:
        return self.oauth.insufficient_scope(resource, scope)

    def reload_after_restore(self) -> None:
        """The API keys' table, read again after a SnapStart restore (the JWKS are public keys: nothing to drop)."""
        reload = getattr(self.api_keys, "reload_after_restore", None)
        if reload is not None:
            reload()

    def metadata(self, resource: str) -> dict[str, Any]:
        return self.oauth.metadata(resource)


def metadata_url(resource: str) -> str:
    """RFC 9728 section 3.1: the well-known path inserted between the host and the resource's path."""
    parts = urllib.parse.urlsplit(resource)
    path = parts.path.rstrip("/")
    return f"{parts.scheme}://{parts.netloc}{METADATA_PATH}{path}"


def _scopes(claims: dict[str, Any]) -> set[str]:
    # `scope` is a space-separated string (RFC 9068, Cognito, Auth0, Okta); Entra ID uses `scp`.
    found: set[str] = set()
    for name in ("scope", "scp"):
        value = claims.get(name)
        if isinstance(value, str):
            found.update(value.split())
        elif isinstance(value, list):
            found.update(item for item in value if isinstance(item, str))
    return found


def _same(presented: Any, expected: str) -> bool:
    return isinstance(presented, str) and hmac.compare_digest(presented.encode(), expected.encode())
