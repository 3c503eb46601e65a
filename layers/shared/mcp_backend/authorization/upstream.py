"""User login, delegated to an upstream OpenID Connect provider: the stack's Cognito user pool (its managed
login, and through it any SAML/OIDC provider the pool federates) or any OIDC issuer.

The authorization server is an ordinary OIDC relying party: authorization code with PKCE (S256) and a nonce,
the code exchanged at the provider's token endpoint, the ID token verified with PyJWT against the provider's
JWKS (issuer, audience = our client id, expiry, nonce). The provider's endpoints come from its discovery
document. The user's groups (a claim, `cognito:groups` for Cognito) map to a tier: the highest tier any
group maps to, `free` otherwise.

Every refresh checks the user again. For the stack's pool (`current_tier`): cognito-idp AdminGetUser (the
user still exists and is enabled) and AdminListGroupsForUser (the tier from today's groups). Another provider
(`renewed`): the login asks for `offline_access` when its discovery lists the scope, and its refresh token is
kept with the grant; each refresh exchanges it at the provider's token endpoint, and the tier comes from the
groups claim of the ID token it answers. `invalid_grant` there means the user's access ended (UserGone). A
provider that gave no refresh token is asked nothing: its users keep the tier of their sign-in until the grant
ends; an operator ends a grant sooner with `python -m mcp_backend.authorization grants revoke`.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import threading
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

import anyio.to_thread
import httpx
import jwt

from mcp_backend.aws import botocore_errors, client_or_lazy
from mcp_backend.config import AuthorizationServerSettings, highest_tier
from mcp_backend.jwks import Fetch, JwksCache, fetch_url
from mcp_backend.netsafety import DeadlinePassed, OutboundDeadline
from mcp_backend.tiers import Tier

# The token exchange as a whole (connect, TLS, headers, body): the user waits on it.
TOKEN_DEADLINE_SECONDS = 5.0
# The OIDC scope that asks the provider for a refresh token (OpenID Connect Core 1.0, section 11).
OFFLINE_ACCESS = "offline_access"


class UpstreamLoginFailed(Exception):
    """The provider's answer cannot be used (a refused code, a bad ID token): the message names the fault only."""


class UserGone(Exception):
    """The user was deleted or disabled upstream: their grants end."""


class UpstreamUnavailable(Exception):
    """The provider cannot be asked right now (throttled, unreachable): the caller may retry; nothing ends."""


@dataclass(frozen=True)
class Identity:
    subject: str
    tier: Tier
    name: str  # shown on the consent screen (email or username), never logged
    username: str = ""  # the provider's own name for the user (Cognito: cognito:username), for the re-check
    # Another provider's refresh token, kept with the grant for the re-check (never for the pool); never logged.
    refresh_token: str = field(default="", repr=False)


@dataclass(frozen=True)
class Renewal:
    """What the provider answered a refresh: the tier of its new ID token (None without one) and the refresh
    token to keep (the rotated one, or the same)."""

    tier: Tier | None
    refresh_token: str = field(repr=False)


def pkce_pair() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    return verifier, challenge


def tier_of(groups: Any, tier_map: dict[str, Tier]) -> Tier:
    return highest_tier(groups, tier_map)


class Upstream:
    def __init__(
        self,
        settings: AuthorizationServerSettings,
        fetch: Fetch = fetch_url,
        ssm: Any = None,
        secretsmanager: Any = None,
        transport: httpx.BaseTransport | None = None,
        cognito: Any = None,
    ) -> None:
        self.settings = settings
        self.fetch = fetch
        self.transport = transport  # tests answer the token endpoint; None is the network
        self.ssm = client_or_lazy(ssm, "ssm") if settings.upstream_client_id_parameter else None
        self.secretsmanager = client_or_lazy(secretsmanager, "secretsmanager")
        self.cognito = client_or_lazy(cognito, "cognito-idp")
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
        document = await anyio.to_thread.run_sync(self._discovered)
        endpoint = document["authorization_endpoint"]
        query = {
            "response_type": "code",
            "client_id": self._client_id,
            "redirect_uri": redirect_uri,
            "scope": self._login_scopes(document),
            "state": state,
            "nonce": nonce,
            "code_challenge": challenge,
            "code_challenge_method": "S256",
        }
        return f"{endpoint}?{urllib.parse.urlencode(query)}"

    def _login_scopes(self, document: dict[str, Any]) -> str:
        """The configured scopes, and `offline_access` when another provider lists it (a refresh token for the
        re-check). The stack's pool is re-checked with its admin API instead."""
        scopes = self.settings.upstream_scopes.split()
        supported = document.get("scopes_supported")
        if (
            not self.settings.upstream_user_pool_id
            and isinstance(supported, list)
            and OFFLINE_ACCESS in supported
            and OFFLINE_ACCESS not in scopes
        ):
            scopes.append(OFFLINE_ACCESS)
        return " ".join(scopes)

    async def identity(self, code: str, redirect_uri: str, verifier: str, nonce: str) -> Identity:
        return await anyio.to_thread.run_sync(self._identity, code, redirect_uri, verifier, nonce)

    def _identity(self, code: str, redirect_uri: str, verifier: str, nonce: str) -> Identity:
        self._discovered()
        form = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": redirect_uri,
            "client_id": self._client_id,
            "code_verifier": verifier,
        }
        answer = self._token_request(form, UpstreamLoginFailed)
        if answer.status_code != 200:
            raise UpstreamLoginFailed(f"the provider refused the code (HTTP {answer.status_code})")
        try:
            body = answer.json()
            id_token = body["id_token"]
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
        username = claims.get("cognito:username")
        refresh_token = body.get("refresh_token")
        kept = refresh_token if isinstance(refresh_token, str) and not self.settings.upstream_user_pool_id else ""
        return Identity(
            subject=subject, tier=tier, name=str(name), username=str(username or subject), refresh_token=kept
        )

    def _token_request(self, form: dict[str, str], failure: type[Exception]) -> httpx.Response:
        """POST `form` (with the client's secret) to the provider's token endpoint within TOKEN_DEADLINE_SECONDS;
        `failure` raised when it cannot be reached or does not answer in time."""
        document = self._discovered()
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
                    raise failure(late) from None
                raise failure("the provider's token endpoint cannot be reached") from None
            if deadline.cut:
                raise failure(late)
        return answer

    async def renewed(self, subject: str, refresh_token: str) -> Renewal:
        """Another provider's answer to its refresh token: the user's tier now and the token to keep. UserGone
        when the provider ends the grant (`invalid_grant`); UpstreamUnavailable when it cannot answer."""
        return await anyio.to_thread.run_sync(self._renewed, subject, refresh_token)

    def _renewed(self, subject: str, refresh_token: str) -> Renewal:
        try:
            self._discovered()
            form = {"grant_type": "refresh_token", "refresh_token": refresh_token, "client_id": self._client_id}
            answer = self._token_request(form, UpstreamUnavailable)
        except (
            UpstreamLoginFailed,
            OSError,
            ValueError,
            botocore_errors.ClientError,
            botocore_errors.BotoCoreError,
        ) as error:
            # Discovery, its keys or the client's secret unreadable: nobody's grant ends for that.
            raise UpstreamUnavailable(f"the provider cannot be asked ({type(error).__name__})") from None
        if answer.status_code == 400 and _oauth_error(answer) == "invalid_grant":
            raise UserGone
        if answer.status_code != 200:
            raise UpstreamUnavailable(f"the provider did not refresh (HTTP {answer.status_code})")
        try:
            body = answer.json()
            id_token, rotated = body.get("id_token"), body.get("refresh_token")
        except (ValueError, AttributeError):
            raise UpstreamUnavailable("the provider's refresh answer is not a JSON object") from None
        tier = None
        if isinstance(id_token, str):
            try:
                claims = self._verified(id_token)
            except UpstreamLoginFailed as error:
                raise UpstreamUnavailable(str(error)) from None
            if claims.get("sub") != subject:
                raise UpstreamUnavailable("the refreshed ID token names another subject")
            tier = tier_of(claims.get(self.settings.upstream_groups_claim), self.settings.tier_map())
        return Renewal(tier=tier, refresh_token=rotated if isinstance(rotated, str) and rotated else refresh_token)

    async def current_tier(self, subject: str, username: str) -> Tier | None:
        """The user's tier now, checked with the provider; None when the provider cannot be asked (another
        OIDC provider: the module docstring). UserGone when the user was deleted or disabled."""
        if not self.settings.upstream_user_pool_id:
            return None
        return await anyio.to_thread.run_sync(self._pool_tier, username or subject)

    def _pool_tier(self, username: str) -> Tier:
        pool = self.settings.upstream_user_pool_id
        try:
            user = self.cognito.admin_get_user(UserPoolId=pool, Username=username)
            if user.get("Enabled") is not True:
                raise UserGone
            pages = self.cognito.get_paginator("admin_list_groups_for_user").paginate(
                UserPoolId=pool, Username=username
            )
            groups = [group["GroupName"] for page in pages for group in page.get("Groups", [])]
        except botocore_errors.ClientError as error:
            if error.response.get("Error", {}).get("Code") == "UserNotFoundException":
                raise UserGone from None
            raise UpstreamUnavailable("the user pool cannot be asked") from None
        except botocore_errors.BotoCoreError:
            raise UpstreamUnavailable("the user pool cannot be reached") from None
        return tier_of(groups, self.settings.tier_map())

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


def _oauth_error(answer: httpx.Response) -> str:
    """The RFC 6749 `error` code of a token endpoint's error answer ("" when it has none)."""
    try:
        error = answer.json().get("error")
    except (ValueError, AttributeError):
        return ""
    return error if isinstance(error, str) else ""
