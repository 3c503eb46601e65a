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

import hmac
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, get_args

from mcp.shared.auth import ProtectedResourceMetadata
from pydantic import ValidationError

from mcp_backend.api_keys import API_KEY_PREFIX, Principal
from mcp_backend.config import McpSettings, highest_tier, tier_map
from mcp_backend.doors import METADATA_PATH
from mcp_backend.jwks import Fetch, JwksCache, fetch_url
from mcp_backend.mcp.auth import Authenticator, ScopedPrincipal
from mcp_backend.mcp.worker_threads import run_in_worker_thread
from mcp_backend.observability import logger
from mcp_backend.tiers import LOWEST_TIER, Tier
from mcp_backend.tools.table import Access

if TYPE_CHECKING:
    pass

MAX_TOKEN_CHARS = 8192
_KEY_FAMILIES = {"RSA": ("RS", "PS"), "EC": ("ES",), "OKP": ("EdDSA",)}


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
    # authorization server), or with `tier_map` (an external issuer's values, mapped). Empty, absent, or a value
    # that is no tier (unmapped): the lowest tier.
    tier_claim: str = ""
    tier_map: tuple[tuple[str, Tier], ...] = ()

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
            tier_map=tuple(tier_map(settings.oauth_tier_map, "OAUTH_TIER_MAP").items()),
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
        if self.policy.tier_map:
            return highest_tier(tier, dict(self.policy.tier_map))
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
