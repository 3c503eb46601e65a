"""The MCP SDK's `OAuthAuthorizationServerProvider` over AuthorizationTable: the SDK's handlers parse and check
the protocol (registration, authorize, token with PKCE S256, revoke); this class decides and remembers.

- Codes live `authorization_code_seconds`, are stored by hash, and are spent by one conditional update: a
  second exchange of the same code is refused and revokes every token issued from it (RFC 6749 section
  4.1.2, OAuth 2.1 section 4.1.3).
- Each consent starts a family (a grant) that ends `authorization_grant_days` after the consent; every refresh
  token of it names the family and expires with it: rotation never extends it. A refresh token is rotated on
  every use (spent by one conditional update, a new one issued); presenting a spent one is reuse: the
  family is revoked, so the thief's and the user's tokens both stop (OAuth 2.1 section 4.3.1).
- Each refresh checks the user upstream first and issues the tier found: the stack's pool by its admin API
  (Upstream.current_tier); another provider by its own refresh token, kept with the grant and replaced when
  the provider rotates it (Upstream.renewed). A user deleted or disabled there (the provider's
  `invalid_grant`) gets `invalid_grant` and the family is revoked. A provider that cannot be
  asked right now is UpstreamUnavailable (503 at /token), and the refresh token stays unspent.
- Revocation (RFC 7009) of a refresh or access token revokes its family. Access tokens are JWTs the
  endpoint checks on its own: they stay valid until they expire (`access_token_seconds`, default 10 min).
"""

from __future__ import annotations

import secrets
import time
import urllib.parse
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

import anyio.to_thread
import jwt
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    AuthorizeError,
    IdentityAssertionParams,
    RefreshToken,
    RegistrationError,
    TokenError,
)
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from pydantic import ValidationError

from mcp_backend.authorization.clients import (
    OPERATOR_PREFIX,
    Client,
    MetadataDocuments,
    RejectedClient,
    check_redirect_uris,
    hashed_secret,
    is_metadata_url,
)
from mcp_backend.authorization.resource import Resources
from mcp_backend.authorization.signing import ALGORITHM, KmsSigner
from mcp_backend.authorization.store import AuthorizationStore, digest
from mcp_backend.authorization.upstream import Identity, Upstream, UserGone, pkce_pair
from mcp_backend.config import AuthorizationServerSettings
from mcp_backend.observability import logger

TRANSACTION_SECONDS = 600  # from /authorize to the consent form's answer
SUPPORTED_GRANTS = frozenset({"authorization_code", "refresh_token"})
# The hash of the browser binding cookie of the /authorize request being handled (mcp_backend.authorization.app
# sets it around the SDK's handler, which calls `authorize` with the SDK's arguments only).
BROWSER: ContextVar[str | None] = ContextVar("browser", default=None)


class StoredCode(AuthorizationCode):
    tier: str = "free"
    family: str


class StoredRefreshToken(RefreshToken):
    tier: str = "free"
    family: str


class Provider:
    """One issuer's provider (the app builds one per issuer URL)."""

    def __init__(
        self,
        issuer: str,
        settings: AuthorizationServerSettings,
        store: AuthorizationStore,
        signer: KmsSigner,
        upstream: Upstream,
        documents: MetadataDocuments,
        resources: Resources,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.issuer = issuer
        self.settings = settings
        self.store = store
        self.signer = signer
        self.upstream = upstream
        self.documents = documents
        self.resources = resources
        self.clock = clock

    @property
    def callback_url(self) -> str:
        return f"{self.issuer}/callback"

    # Clients

    async def get_client(self, client_id: str) -> Client | None:
        if is_metadata_url(client_id):
            return await self.documents.client(client_id)
        if len(client_id) > 64:
            return None
        record = self.store.get(f"client#{client_id}")
        if record is None:
            return None
        record.pop("_used", None)
        return Client.model_validate(record)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        try:
            check_redirect_uris(
                [str(uri) for uri in client_info.redirect_uris or []],
                self.redirect_hosts,
                self.settings.listed("native_redirect_uris"),
            )
        except RejectedClient as error:
            raise RegistrationError("invalid_redirect_uri", str(error)) from None
        if set(client_info.grant_types) - SUPPORTED_GRANTS:
            raise RegistrationError("invalid_client_metadata", "grant_types: authorization_code, refresh_token")
        if set(client_info.response_types) != {"code"}:
            raise RegistrationError("invalid_client_metadata", "response_types: code only")
        record = client_info.model_dump(mode="json", exclude_none=True)
        if client_info.client_secret:  # the SDK answers the client with it; the table keeps its hash only
            record["client_secret"] = hashed_secret(client_info.client_secret)
        self.store.put(
            f"client#{client_info.client_id}",
            record,
            self.settings.client_idle_seconds,
            new=True,
        )

    @property
    def redirect_hosts(self) -> tuple[str, ...]:
        return tuple(host.lower() for host in self.settings.listed("redirect_hosts"))

    # Authorization: the upstream login, then consent (mcp_backend.authorization.app)

    async def authorize(self, client: OAuthClientInformationFull, params: AuthorizationParams) -> str:
        # The parameter behind it is read once per instance: off the event loop
        resource = await anyio.to_thread.run_sync(self.resources.resolve, params.resource)
        if not params.scopes:  # Client.validate_scope grants at least one or refuses; fail closed all the same
            raise AuthorizeError("invalid_scope", "no scope this server grants was requested")
        transaction, nonce = secrets.token_urlsafe(32), secrets.token_urlsafe(16)
        verifier, challenge = pkce_pair()
        self.store.put(
            f"txn#{transaction}",
            {
                "client_id": client.client_id,
                "redirect_uri": str(params.redirect_uri),
                "redirect_uri_provided_explicitly": params.redirect_uri_provided_explicitly,
                "state": params.state,
                "scopes": params.scopes,
                "code_challenge": params.code_challenge,
                "resource": resource,
                "upstream_verifier": verifier,
                "nonce": nonce,
                "browser": BROWSER.get(),  # none: /callback refuses it (fail closed)
            },
            TRANSACTION_SECONDS,
        )
        return await self.upstream.login_url(self.callback_url, transaction, nonce, challenge)

    def transaction(self, transaction: str) -> dict[str, Any] | None:
        return self.store.get(f"txn#{transaction}") if 0 < len(transaction) <= 64 else None

    def remember_login(self, transaction: str, record: dict[str, Any], identity: Identity, csrf: str) -> None:
        record.pop("_used", None)
        record.update(
            subject=identity.subject,
            tier=identity.tier,
            name=identity.name,
            username=identity.username,
            csrf=digest(csrf),
        )
        if identity.refresh_token:
            record["upstream_refresh"] = identity.refresh_token
        self.store.put(f"txn#{transaction}", record, TRANSACTION_SECONDS)

    def approve(self, transaction: str, record: dict[str, Any]) -> str:
        """The client's redirect URL with a new code (the caller has spent the transaction), in a new grant."""
        code, family = secrets.token_urlsafe(32), secrets.token_urlsafe(16)
        self.store.start_grant(
            family,
            record["subject"],
            record.get("username") or record["subject"],
            record["client_id"],
            self.settings.grant_seconds,
            upstream_refresh=record.get("upstream_refresh", ""),
        )
        stored = StoredCode(
            code="",  # only its hash is the key; the record never holds the code
            scopes=record["scopes"],
            expires_at=self.clock() + self.settings.authorization_code_seconds,
            client_id=record["client_id"],
            code_challenge=record["code_challenge"],
            redirect_uri=record["redirect_uri"],
            redirect_uri_provided_explicitly=record["redirect_uri_provided_explicitly"],
            resource=record["resource"],
            subject=record["subject"],
            tier=record["tier"],
            family=family,
        )
        self.store.put(f"code#{digest(code)}", stored.model_dump(mode="json"), self.settings.authorization_code_seconds)
        return self.redirect(record, code=code)

    def redirect(self, record: dict[str, Any], **answer: str) -> str:
        query = {**answer, "iss": self.issuer}  # RFC 9207: the client can tell which server answered
        if record.get("state") is not None:
            query["state"] = record["state"]
        base = record["redirect_uri"]
        return f"{base}{'&' if '?' in base else '?'}{urllib.parse.urlencode(query)}"

    def spend_transaction(self, transaction: str) -> bool:
        return self.store.mark_used(f"txn#{transaction}")

    # Codes

    async def load_authorization_code(self, client: OAuthClientInformationFull, authorization_code: str) -> Any:
        key = f"code#{digest(authorization_code)}"
        record = self.store.get(key)
        if record is None:
            return None
        if record.pop("_used"):
            self._revoke_family(record["family"], "authorization code replayed")
            return None
        return StoredCode.model_validate({**record, "code": authorization_code})

    async def exchange_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: StoredCode
    ) -> OAuthToken:
        if not self.store.mark_used(f"code#{digest(authorization_code.code)}"):
            self._revoke_family(authorization_code.family, "authorization code replayed")
            raise TokenError("invalid_grant", "authorization code already used")
        grant = self._live_grant(authorization_code.family)
        return self._issue(
            client,
            authorization_code.subject or "",
            authorization_code.tier,
            authorization_code.scopes,
            authorization_code.resource,
            authorization_code.family,
            int(grant["ends"]),
        )

    # Refresh tokens

    async def load_refresh_token(self, client: OAuthClientInformationFull, refresh_token: str) -> Any:
        if len(refresh_token) > 128:
            return None
        record = self.store.get(f"refresh#{digest(refresh_token)}")
        if record is None:
            return None
        if record.pop("_used"):
            self._revoke_family(record["family"], "refresh token reused")
            return None
        if self._family_revoked(record["family"]):
            return None
        return StoredRefreshToken.model_validate({**record, "token": refresh_token})

    async def exchange_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: StoredRefreshToken, scopes: list[str]
    ) -> OAuthToken:
        grant = self._live_grant(refresh_token.family)
        # Before the token is spent: a provider that cannot be asked (UpstreamUnavailable) leaves it usable.
        tier = await self._current_tier(refresh_token, grant)
        if not self.store.mark_used(f"refresh#{digest(refresh_token.token)}"):
            self._revoke_family(refresh_token.family, "refresh token reused")
            raise TokenError("invalid_grant", "refresh token already used")
        if self._family_revoked(refresh_token.family):
            raise TokenError("invalid_grant", "refresh token revoked")
        return self._issue(
            client,
            refresh_token.subject or "",
            tier,
            scopes,
            refresh_token.resource,
            refresh_token.family,
            int(grant["ends"]),
        )

    def _live_grant(self, family: str) -> dict[str, Any]:
        grant = self.store.grant(family)
        if grant is None:  # its lifetime is over (or it predates grant records): the user signs in again
            raise TokenError("invalid_grant", "the grant has ended; sign in again")
        if "revoked" in grant:
            raise TokenError("invalid_grant", "refresh token revoked")
        return grant

    async def _current_tier(self, refresh_token: StoredRefreshToken, grant: dict[str, Any]) -> str:
        kept = str(grant.get("upstream_refresh", ""))
        try:
            if kept:
                renewal = await self.upstream.renewed(refresh_token.subject or "", kept)
                if renewal.refresh_token != kept:
                    self.store.keep_upstream_refresh(refresh_token.family, grant, renewal.refresh_token)
                tier = renewal.tier
            else:
                tier = await self.upstream.current_tier(refresh_token.subject or "", str(grant.get("username", "")))
        except UserGone:
            self._revoke_family(refresh_token.family, "the user was deleted or disabled upstream")
            raise TokenError("invalid_grant", "the user can no longer sign in") from None
        return refresh_token.tier if tier is None else tier

    # Access tokens and revocation

    async def load_access_token(self, token: str) -> AccessToken | None:
        """Our own access token (for revocation): its signature, issuer and expiry checked."""
        try:
            public = jwt.PyJWK.from_dict(self.signer.public_jwk())
            claims = jwt.decode(
                token, public.key, algorithms=[ALGORITHM], issuer=self.issuer, options={"verify_aud": False}
            )
            return AccessToken(
                token=token,
                client_id=str(claims["client_id"]),
                scopes=str(claims.get("scope", "")).split(),
                expires_at=int(claims["exp"]),
                resource=claims.get("aud"),
                subject=claims.get("sub"),
                claims={"fam": claims.get("fam")},
            )
        except (jwt.PyJWTError, KeyError, ValidationError):
            return None

    async def revoke_token(self, token: AccessToken | StoredRefreshToken) -> None:
        family = token.family if isinstance(token, StoredRefreshToken) else (token.claims or {}).get("fam")
        if isinstance(family, str):
            self._revoke_family(family, "revoked by the client")

    async def exchange_identity_assertion(
        self, client: OAuthClientInformationFull, params: IdentityAssertionParams
    ) -> OAuthToken:
        raise TokenError("unsupported_grant_type", "the JWT bearer grant is not supported")

    def _revoke_family(self, family: str, reason: str) -> None:
        self.store.revoke_grant(family, reason, self.settings.grant_seconds)
        logger.warning("token family revoked", extra={"reason": reason})

    def _family_revoked(self, family: str) -> bool:
        return self.store.get(f"revoked#{family}") is not None

    def _issue(
        self,
        client: OAuthClientInformationFull,
        subject: str,
        tier: str,
        scopes: list[str],
        resource: str | None,
        family: str,
        ends: int,
    ) -> OAuthToken:
        now = int(self.clock())
        if ends <= now:
            raise TokenError("invalid_grant", "the grant has ended; sign in again")
        claims = {
            "iss": self.issuer,
            "sub": subject,
            "aud": resource,
            "client_id": client.client_id,
            "scope": " ".join(scopes),
            "tier": tier,
            "iat": now,
            "exp": now + self.settings.access_token_seconds,
            "jti": secrets.token_urlsafe(16),
            "fam": family,
        }
        access_token = self.signer.sign(claims)
        refresh_token = secrets.token_urlsafe(32)
        stored = StoredRefreshToken(
            token="",  # only its hash is the key
            client_id=client.client_id,
            scopes=scopes,
            expires_at=ends,  # the grant's end, never later
            resource=resource,
            subject=subject,
            tier=tier,
            family=family,
        )
        self.store.put(f"refresh#{digest(refresh_token)}", stored.model_dump(mode="json"), ends - now)
        if not is_metadata_url(client.client_id) and not client.client_id.startswith(OPERATOR_PREFIX):
            self.store.touch(f"client#{client.client_id}", self.settings.client_idle_seconds)
        return OAuthToken(
            access_token=access_token,
            token_type="Bearer",  # noqa: S106 - the RFC 6750 token type, not a secret
            expires_in=self.settings.access_token_seconds,
            scope=" ".join(scopes),
            refresh_token=refresh_token,
        )
