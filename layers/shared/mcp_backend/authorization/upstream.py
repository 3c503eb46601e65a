"""User login, delegated to an upstream OpenID Connect provider: the stack's Cognito user pool (its managed
login, and through it any SAML/OIDC provider the pool federates) or any OIDC issuer.

The authorization server is an ordinary OIDC relying party: authorization code with PKCE (S256) and a nonce,
the code exchanged at the provider's token endpoint, the ID token verified with PyJWT against the provider's
JWKS (issuer, audience = our client id, expiry, nonce). The provider's endpoints come from its discovery
document. The user's groups (a claim, `cognito:groups` for Cognito) map to a tier: the highest tier any
group maps to, `free` otherwise.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import threading
import urllib.parse
from dataclasses import dataclass
from typing import Any

import anyio.to_thread
import httpx
import jwt

from mcp_backend.aws import botocore_errors, client_or_lazy
from mcp_backend.config import AuthorizationServerSettings
from mcp_backend.jwks import Fetch, JwksCache, fetch_url
from mcp_backend.netsafety import DeadlinePassed, OutboundDeadline
from mcp_backend.tiers import TIERS, Tier

TIER_ORDER: tuple[Tier, ...] = TIERS
# The token exchange as a whole (connect, TLS, headers, body): the user waits on it.
TOKEN_DEADLINE_SECONDS = 5.0


class UpstreamLoginFailed(Exception):
    """The provider's answer cannot be used (a refused code, a bad ID token): the message names the fault only."""


@dataclass(frozen=True)
class Identity:
    subject: str
    tier: Tier
    name: str  # shown on the consent screen (email or username), never logged


def pkce_pair() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    return verifier, challenge


def tier_of(groups: Any, tier_map: dict[str, Tier]) -> Tier:
    if isinstance(groups, str):
        groups = groups.split(",")
    if not isinstance(groups, list):
        return "free"
    tiers = {tier_map[group] for group in groups if isinstance(group, str) and group in tier_map}
    return max(tiers, key=TIER_ORDER.index, default="free")


class Upstream:
    def __init__(
        self,
        settings: AuthorizationServerSettings,
        fetch: Fetch = fetch_url,
        ssm: Any = None,
        secretsmanager: Any = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.settings = settings
        self.fetch = fetch
        self.transport = transport  # tests answer the token endpoint; None is the network
        self.ssm = client_or_lazy(ssm, "ssm") if settings.upstream_client_id_parameter else None
        self.secretsmanager = client_or_lazy(secretsmanager, "secretsmanager")
        self._client_secret: str | None = None
        self._discovery: dict[str, Any] | None = None
        self._client_id = settings.upstream_client_id
        self._jwks: JwksCache | None = None
        self._lock = threading.Lock()

    def _discovered(self) -> dict[str, Any]:
        with self._lock:
            if self._discovery is None:
                issuer = self.settings.upstream_issuer
                url = self.settings.upstream_discovery_url or issuer.rstrip("/") + "/.well-known/openid-configuration"
                document = json.loads(self.fetch(url))
                if document.get("issuer") != issuer or not all(
                    isinstance(document.get(name), str)
                    for name in ("authorization_endpoint", "token_endpoint", "jwks_uri")
                ):
                    raise UpstreamLoginFailed("the provider's discovery document is not usable")
                self._discovery = document
                self._jwks = JwksCache(issuer, document["jwks_uri"], self.fetch)
            if not self._client_id and self.ssm is not None:
                self._client_id = self._login_client_id()
            return self._discovery

    def _login_client_id(self) -> str:
        """The stack's pool login client's id, from the parameter the template writes: it cannot be set on this
        function (the client names this function's URL as its callback, so the template cannot also pass the
        client's id here)."""
        assert self.ssm is not None
        try:
            answer = self.ssm.get_parameter(Name=self.settings.upstream_client_id_parameter)
        except botocore_errors.ClientError:
            raise UpstreamLoginFailed("the login client's id cannot be read") from None
        return str(answer["Parameter"]["Value"])

    async def login_url(self, redirect_uri: str, state: str, nonce: str, challenge: str) -> str:
        endpoint = (await anyio.to_thread.run_sync(self._discovered))["authorization_endpoint"]
        query = {
            "response_type": "code",
            "client_id": self._client_id,
            "redirect_uri": redirect_uri,
            "scope": self.settings.upstream_scopes,
            "state": state,
            "nonce": nonce,
            "code_challenge": challenge,
            "code_challenge_method": "S256",
        }
        return f"{endpoint}?{urllib.parse.urlencode(query)}"

    async def identity(self, code: str, redirect_uri: str, verifier: str, nonce: str) -> Identity:
        return await anyio.to_thread.run_sync(self._identity, code, redirect_uri, verifier, nonce)

    def _identity(self, code: str, redirect_uri: str, verifier: str, nonce: str) -> Identity:
        document = self._discovered()
        form = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": redirect_uri,
            "client_id": self._client_id,
            "code_verifier": verifier,
        }
        secret = self._secret()
        if secret:
            form["client_secret"] = secret  # client_secret_post
        with (
            OutboundDeadline(TOKEN_DEADLINE_SECONDS) as deadline,
            httpx.Client(transport=self.transport, follow_redirects=False, trust_env=False) as client,
        ):
            late = f"the provider's token endpoint did not answer within its {deadline.seconds:g} s deadline"
            try:
                answer = client.post(
                    document["token_endpoint"],
                    data=form,
                    timeout=deadline.timeout(TOKEN_DEADLINE_SECONDS),
                    extensions=deadline.request_extensions(),
                )
            except (httpx.HTTPError, DeadlinePassed):
                if deadline.expired:
                    raise UpstreamLoginFailed(late) from None
                raise UpstreamLoginFailed("the provider's token endpoint cannot be reached") from None
            if deadline.cut:
                raise UpstreamLoginFailed(late)
        if answer.status_code != 200:
            raise UpstreamLoginFailed(f"the provider refused the code (HTTP {answer.status_code})")
        try:
            id_token = answer.json()["id_token"]
        except (ValueError, KeyError, TypeError):
            raise UpstreamLoginFailed("the provider returned no ID token") from None
        claims = self._verified(id_token)
        if claims.get("nonce") != nonce:
            raise UpstreamLoginFailed("the ID token's nonce does not match")
        subject = claims.get("sub")
        if not isinstance(subject, str) or not subject:
            raise UpstreamLoginFailed("the ID token has no subject")
        name = next((claims[c] for c in ("email", "cognito:username", "preferred_username") if c in claims), subject)
        tier = tier_of(claims.get(self.settings.upstream_groups_claim), self.settings.tier_map())
        return Identity(subject=subject, tier=tier, name=str(name))

    def _secret(self) -> str:
        """The upstream client's secret, read once from Secrets Manager (never from the environment)."""
        if not self.settings.upstream_client_secret_id:
            return ""
        if self._client_secret is None:
            answer = self.secretsmanager.get_secret_value(SecretId=self.settings.upstream_client_secret_id)
            self._client_secret = str(answer["SecretString"]).strip()
        return self._client_secret

    def _verified(self, id_token: str) -> dict[str, Any]:
        assert self._jwks is not None
        try:
            kid = jwt.get_unverified_header(id_token).get("kid")
            key = self._jwks.key_for(kid) if isinstance(kid, str) else None
            if key is None:
                raise UpstreamLoginFailed("the ID token's key is unknown")
            return dict(
                jwt.decode(
                    id_token,
                    key.jwk.key,
                    algorithms=["RS256", "ES256"],
                    audience=self._client_id,
                    issuer=self.settings.upstream_issuer,
                    leeway=30,
                    options={"require": ["exp", "iss", "aud", "sub"]},
                )
            )
        except jwt.PyJWTError as error:
            raise UpstreamLoginFailed(f"the ID token is not valid ({type(error).__name__})") from None
