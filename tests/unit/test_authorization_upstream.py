"""The authorization server's upstream OIDC login (mcp_backend.authorization.upstream) against a stand-in provider:
its discovery and JWKS from a stub fetch, its token endpoint an httpx mock transport. A provider answer that cannot
be trusted is UpstreamLoginFailed (the user goes back to the client with access_denied), never a signed-in user."""

from __future__ import annotations

import json
import secrets
import time
import urllib.parse
from typing import Any

import anyio
import boto3
import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

import mcp_backend.authorization.upstream
from mcp_backend.authorization.upstream import Identity, Upstream, UpstreamLoginFailed, UpstreamUnavailable, UserGone
from mcp_backend.config import AuthorizationServerSettings
from tests.loopback_http import trickling

ISSUER = "https://idp.example"
CLIENT_ID = "as-client"
KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
OTHER_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)


def settings(**overrides: str) -> AuthorizationServerSettings:
    return AuthorizationServerSettings.model_validate(
        {
            "AUTHORIZATION_TABLE_NAME": "t",
            "AUTHORIZATION_SIGNING_KEY_ID": "k",
            "UPSTREAM_ISSUER": ISSUER,
            "UPSTREAM_CLIENT_ID": CLIENT_ID,
            "UPSTREAM_TIER_MAP": "paying=pro,staff=internal",
            **overrides,
        }
    )


def provider_documents(url: str) -> bytes:
    if url.endswith("/.well-known/openid-configuration"):
        return json.dumps(
            {
                "issuer": ISSUER,
                "authorization_endpoint": f"{ISSUER}/oauth2/authorize",
                "token_endpoint": f"{ISSUER}/oauth2/token",
                "jwks_uri": f"{ISSUER}/jwks",
            }
        ).encode()
    public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(KEY.public_key()))
    return json.dumps({"keys": [{**public, "kid": "k1", "use": "sig"}]}).encode()


def id_token(key: Any = KEY, **overrides: Any) -> str:
    now = int(time.time())
    claims = {
        "iss": ISSUER,
        "sub": "user-1",
        "aud": CLIENT_ID,
        "exp": now + 300,
        "iat": now,
        "nonce": "n-1",
        "email": "ann@example.com",
        "cognito:groups": ["paying"],
        "cognito:username": "ann",
        **overrides,
    }
    return jwt.encode({k: v for k, v in claims.items() if v is not None}, key, algorithm="RS256", headers={"kid": "k1"})


def upstream(answer: httpx.Response, seen: list[dict[str, str]] | None = None, **overrides: str) -> Upstream:
    def token_endpoint(request: httpx.Request) -> httpx.Response:
        if seen is not None:
            seen.append(dict(urllib.parse.parse_qsl(request.content.decode())))
        return answer

    return Upstream(settings(**overrides), fetch=provider_documents, transport=httpx.MockTransport(token_endpoint))


def sign_in(provider: Upstream, nonce: str = "n-1") -> Identity:
    return anyio.run(provider.identity, "code-1", "https://as.example/callback", "verifier-1", nonce)


def test_a_valid_id_token_signs_the_user_in_with_the_tier_of_their_groups():
    # Given a provider that answers the code with a valid ID token
    seen: list[dict[str, str]] = []
    provider = upstream(httpx.Response(200, json={"id_token": id_token()}), seen)

    # When the callback's code is exchanged
    identity = sign_in(provider)

    # Then the user is the token's subject, shown by email, on the tier their group maps to; the exchange sent
    # the verifier and the callback URL; the provider's username is kept for the re-check of each refresh
    assert identity == Identity(subject="user-1", tier="pro", name="ann@example.com", username="ann")
    assert seen[0]["code_verifier"] == "verifier-1" and seen[0]["redirect_uri"] == "https://as.example/callback"
    assert "client_secret" not in seen[0]


@pytest.mark.parametrize(
    "token",
    [
        id_token(nonce="another"),
        id_token(aud="another-client"),
        id_token(iss="https://other-idp.example"),
        id_token(exp=int(time.time()) - 3600),
        id_token(key=OTHER_KEY),
        id_token(sub=None),
        "not-a-jwt",
    ],
    ids=["nonce", "audience", "issuer", "expired", "signature", "no-subject", "garbage"],
)
def test_an_id_token_that_cannot_be_trusted_signs_nobody_in(token):
    provider = upstream(httpx.Response(200, json={"id_token": token}))
    with pytest.raises(UpstreamLoginFailed):
        sign_in(provider)


@pytest.mark.parametrize(
    "answer",
    [httpx.Response(400, json={"error": "invalid_grant"}), httpx.Response(200, json={"access_token": "x"})],
    ids=["refused-code", "no-id-token"],
)
def test_a_refused_code_or_an_answer_without_an_id_token_signs_nobody_in(answer):
    with pytest.raises(UpstreamLoginFailed):
        sign_in(upstream(answer))


def test_the_login_url_carries_pkce_s256_the_nonce_and_the_state():
    provider = upstream(httpx.Response(200))
    url = anyio.run(provider.login_url, "https://as.example/callback", "state-1", "n-1", "challenge-1")
    query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(url).query))
    assert url.startswith(f"{ISSUER}/oauth2/authorize?")
    assert query == {
        "response_type": "code",
        "client_id": CLIENT_ID,
        "redirect_uri": "https://as.example/callback",
        "scope": "openid email profile",
        "state": "state-1",
        "nonce": "n-1",
        "code_challenge": "challenge-1",
        "code_challenge_method": "S256",
    }


def test_a_discovery_document_naming_another_issuer_is_refused():
    def documents(url: str) -> bytes:
        return json.dumps({"issuer": "https://evil.example", "jwks_uri": "x"}).encode()

    provider = Upstream(settings(), fetch=documents)
    with pytest.raises(UpstreamLoginFailed):
        anyio.run(provider.login_url, "https://as.example/callback", "s", "n", "c")


def test_an_unknown_tier_in_the_map_is_a_configuration_error():
    with pytest.raises(ValueError, match="UPSTREAM_TIER_MAP"):
        settings(UPSTREAM_TIER_MAP="paying=gold")


def test_a_client_secret_comes_from_secrets_manager_and_goes_in_the_token_request(aws):
    # Given the upstream client's secret in Secrets Manager (not in the environment)
    secrets = boto3.client("secretsmanager")
    arn = secrets.create_secret(Name="stack/upstream-client", SecretString="s3cr3t\n")["ARN"]
    seen: list[dict[str, str]] = []

    # When a code is exchanged
    sign_in(upstream(httpx.Response(200, json={"id_token": id_token()}), seen, UPSTREAM_CLIENT_SECRET_ID=arn))

    # Then the request carried the secret (client_secret_post)
    assert seen[0]["client_secret"] == "s3cr3t"


@pytest.mark.parametrize("stored", [True, False], ids=["stored", "missing"])
def test_the_stack_pools_client_id_comes_from_its_parameter_or_nobody_signs_in(aws, stored):
    # Given the stack's pool as the provider: its login client's id in the parameter the template writes (or not)
    name = "/stack/authorization/login-client-id"
    if stored:
        boto3.client("ssm").put_parameter(Name=name, Value="pool-client-1", Type="String")
    provider = Upstream(
        settings(UPSTREAM_CLIENT_ID="", UPSTREAM_CLIENT_ID_PARAMETER=name),
        fetch=provider_documents,
        ssm=boto3.client("ssm"),
    )

    # When the login starts
    def login() -> str:
        return anyio.run(provider.login_url, "https://as.example/callback", "s", "n", "c")

    # Then it names that client; without the parameter it is refused (the user goes back with access_denied)
    if stored:
        assert urllib.parse.parse_qs(urllib.parse.urlsplit(login()).query)["client_id"] == ["pool-client-1"]
    else:
        with pytest.raises(UpstreamLoginFailed, match="login client"):
            login()


def test_a_token_endpoint_that_trickles_its_answer_is_cut_at_the_exchanges_deadline(monkeypatch):
    # Given a provider whose token endpoint sends its answer one byte at a time, and a 0.5 s exchange deadline
    monkeypatch.setattr(mcp_backend.authorization.upstream, "TOKEN_DEADLINE_SECONDS", 0.5)
    body = json.dumps({"id_token": id_token()}).encode()
    answer = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)
    with trickling(answer) as (base, closed_early):

        def documents(url: str) -> bytes:
            document = json.loads(provider_documents(url))
            return json.dumps({**document, "token_endpoint": f"{base}/oauth2/token"}).encode()

        provider = Upstream(settings(), fetch=documents)

        # When the callback's code is exchanged
        # Then nobody is signed in, the failure names the deadline, and the provider saw the connection closed
        with pytest.raises(UpstreamLoginFailed, match=r"0\.5 s deadline"):
            sign_in(provider)
        assert closed_early.wait(10)


def pool_with_user(groups: list[str]) -> tuple[Any, str]:
    cognito = boto3.client("cognito-idp")
    pool = cognito.create_user_pool(PoolName="users")["UserPool"]["Id"]
    cognito.admin_create_user(UserPoolId=pool, Username="ann")
    for group in groups:
        cognito.create_group(UserPoolId=pool, GroupName=group)
        cognito.admin_add_user_to_group(UserPoolId=pool, Username="ann", GroupName=group)
    return cognito, pool


def recheck(pool: str, cognito: Any, username: str = "ann") -> Any:
    checker = Upstream(settings(UPSTREAM_USER_POOL_ID=pool), fetch=provider_documents, cognito=cognito)
    return anyio.run(checker.current_tier, "user-1", username)


def test_a_refresh_rechecks_a_pool_user_and_finds_the_tier_of_their_groups_today(aws):
    # Given a pool user in the paying group, who then also joins staff
    cognito, pool = pool_with_user(["paying"])
    before = recheck(pool, cognito)
    cognito.create_group(UserPoolId=pool, GroupName="staff")
    cognito.admin_add_user_to_group(UserPoolId=pool, Username="ann", GroupName="staff")

    # When the user is checked again, then removed from both groups and checked once more
    after = recheck(pool, cognito)
    for group in ("paying", "staff"):
        cognito.admin_remove_user_from_group(UserPoolId=pool, Username="ann", GroupName=group)
    removed = recheck(pool, cognito)

    # Then each check found the tier of the groups of the moment
    assert (before, after, removed) == ("pro", "internal", "free")


@pytest.mark.parametrize("change", ["disabled", "deleted"])
def test_a_pool_user_disabled_or_deleted_is_gone(aws, change):
    # Given a pool user who was disabled or deleted after signing in
    cognito, pool = pool_with_user(["paying"])
    if change == "disabled":
        cognito.admin_disable_user(UserPoolId=pool, Username="ann")
    else:
        cognito.admin_delete_user(UserPoolId=pool, Username="ann")

    # When a refresh checks the user, then they are gone
    with pytest.raises(UserGone):
        recheck(pool, cognito)


def test_a_pool_that_cannot_be_asked_is_unavailable_not_gone(aws):
    # Given a pool id that names no pool (an AWS error other than "no such user")
    cognito, _ = pool_with_user([])

    # When a refresh checks the user, then the check is unavailable (retry later), and nobody's grant ends
    with pytest.raises(UpstreamUnavailable):
        recheck("us-east-1_nosuchpool", cognito)


def test_another_oidc_provider_without_a_kept_refresh_token_is_not_asked_and_keeps_the_sign_in_tier():
    # Given an upstream that is not the stack's pool (no pool id), for a grant that kept none of its tokens
    checker = upstream(httpx.Response(500))

    # When a refresh checks the user, then there is no answer to act on (None: keep the tier of the sign-in)
    assert anyio.run(checker.current_tier, "user-1", "ann") is None


class OidcProvider:
    """Another OIDC provider (not the stack's pool), its token endpoint an httpx mock transport. A code answers an
    ID token (with the nonce of the last login URL) and a refresh token; a refresh answers a new ID token with the
    user's groups of the moment and a rotated refresh token, `invalid_grant` for any token but the latest or once
    the user's access `ended`, and 503 while it is `down`."""

    def __init__(self) -> None:
        self.groups = ["paying"]
        self.state = "up"
        self.nonce = "n-1"  # the nonce sign_in() sends, until a login URL names another
        self.issued: list[str] = []
        self.seen: list[dict[str, str]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        form = dict(urllib.parse.parse_qsl(request.content.decode()))
        self.seen.append(form)
        if self.state == "down":
            return httpx.Response(503)
        refreshing = form["grant_type"] == "refresh_token"
        if refreshing and (self.state == "ended" or form["refresh_token"] != self.issued[-1]):
            return httpx.Response(400, json={"error": "invalid_grant"})
        self.issued.append(f"provider-rt-{secrets.token_urlsafe(12)}")
        token = id_token(nonce=None if refreshing else self.nonce, **{"cognito:groups": self.groups})
        return httpx.Response(200, json={"id_token": token, "refresh_token": self.issued[-1], "token_type": "Bearer"})

    @staticmethod
    def documents(url: str) -> bytes:
        document = json.loads(provider_documents(url))
        if "issuer" in document:
            document["scopes_supported"] = ["openid", "email", "offline_access"]
        return json.dumps(document).encode()

    def upstream(self, **overrides: str) -> Upstream:
        """The authorization server's view of this provider; the nonce of each login URL is remembered, as the
        provider's login page would."""
        provider = Upstream(settings(**overrides), fetch=self.documents, transport=httpx.MockTransport(self))
        login_url = provider.login_url

        async def remembering(redirect_uri: str, state: str, nonce: str, challenge: str) -> str:
            self.nonce = nonce
            return await login_url(redirect_uri, state, nonce, challenge)

        provider.login_url = remembering
        return provider


def login_scopes(provider: Upstream) -> list[str]:
    url = anyio.run(provider.login_url, "https://as.example/callback", "s", "n-1", "c")
    return urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)["scope"][0].split()


def test_another_provider_is_asked_for_offline_access_and_its_refresh_token_is_kept():
    # Given another OIDC provider whose discovery lists offline_access, and the stack's pool behind the same
    provider = OidcProvider()
    other, pool = provider.upstream(), provider.upstream(UPSTREAM_USER_POOL_ID="us-east-1_pool")

    # When each builds its login URL and signs the user in
    scopes = (login_scopes(other), login_scopes(pool))
    kept = (sign_in(other).refresh_token, sign_in(pool).refresh_token)

    # Then only the other provider's login asks for offline_access, and only its refresh token is kept (the
    # pool is re-checked by its admin API); the token never shows in the identity's repr
    assert scopes == (["openid", "email", "profile", "offline_access"], ["openid", "email", "profile"])
    assert kept == (provider.issued[0], "")
    assert provider.issued[0] not in repr(sign_in(other))


def test_a_refresh_at_another_provider_finds_the_tier_of_today_and_keeps_the_rotated_token():
    # Given a user signed in through another provider as pro, who then moves to the staff group
    provider = OidcProvider()
    other = provider.upstream()
    signed_in = sign_in(other)
    provider.groups = ["staff"]

    # When a refresh re-checks her with the kept refresh token
    renewal = anyio.run(other.renewed, "user-1", signed_in.refresh_token)

    # Then the provider was asked with the refresh grant and our client id, and answered her tier today and the
    # refresh token to keep from now on
    assert {k: provider.seen[-1][k] for k in ("grant_type", "refresh_token", "client_id")} == {
        "grant_type": "refresh_token",
        "refresh_token": signed_in.refresh_token,
        "client_id": CLIENT_ID,
    }
    assert (renewal.tier, renewal.refresh_token) == ("internal", provider.issued[-1])
    assert renewal.refresh_token != signed_in.refresh_token and renewal.refresh_token not in repr(renewal)


@pytest.mark.parametrize(
    ("state", "outcome"),
    [("ended", UserGone), ("down", UpstreamUnavailable)],
    ids=["invalid_grant: the user's access ended", "503: ask again later"],
)
def test_a_provider_that_ends_the_refresh_token_makes_the_user_gone_and_one_that_is_down_unavailable(state, outcome):
    # Given a user signed in through another provider
    provider = OidcProvider()
    other = provider.upstream()
    signed_in = sign_in(other)

    # When the provider ends her access, or is down, and a refresh re-checks her
    provider.state = state

    # Then she is gone, or the check is unavailable (nobody's grant ends)
    with pytest.raises(outcome):
        anyio.run(other.renewed, "user-1", signed_in.refresh_token)


def test_a_provider_that_cannot_be_reached_is_unavailable_not_gone():
    # Given another provider whose token endpoint refuses connections
    def unreachable(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    other = Upstream(settings(), fetch=OidcProvider.documents, transport=httpx.MockTransport(unreachable))

    # When a refresh re-checks a user, then the check is unavailable
    with pytest.raises(UpstreamUnavailable, match="cannot be reached"):
        anyio.run(other.renewed, "user-1", "provider-rt-1")
