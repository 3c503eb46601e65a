"""The stack's authorization server (mcp_backend.authorization) as clients meet it: its ASGI app on the template's
AuthorizationTable and signing key (moto), the upstream login replaced by a stand-in identity provider, and
client ID metadata documents served by a stub fetch. Every bad input gets its RFC error and nothing issued."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import secrets
import time
import urllib.parse
from typing import Any

import boto3
import botocore.exceptions
import httpx2
import jwt
import pytest
from starlette.testclient import TestClient

import mcp_backend.authorization.__main__ as authorization_cli
from devstack.wired_stack import LocalEnvironment
from mcp_backend.authorization.app import CONSENT_MAX_BODY_BYTES, AuthorizationServer, documents_for
from mcp_backend.authorization.clients import FAILURE_CACHE_SECONDS, SCOPES, MetadataDocuments
from mcp_backend.authorization.signing import KmsSigner
from mcp_backend.authorization.store import AuthorizationStore
from mcp_backend.authorization.upstream import Identity, UpstreamLoginFailed, UpstreamUnavailable, UserGone, tier_of
from mcp_backend.config import AuthorizationServerSettings, load_settings
from mcp_backend.netsafety import PrivateAddress
from mcp_backend.probes.errors import ProbeProtocolError
from mcp_backend.tools.table import Access
from tests.unit.test_authorization_upstream import OidcProvider

ISSUER = "https://auth.example"
RESOURCE = "https://mcp.example/mcp"
REDIRECT = "http://127.0.0.1:5555/callback"
CIMD_URL = "https://client.example/oauth/client.json"


class StandInUpstream:
    """The upstream OIDC provider: any code but "refused" and "unavailable" signs in alice (group paying -> pro).
    `now` is what a refresh's re-check finds: her tier, "gone" (deleted or disabled) or "unavailable"."""

    def __init__(self) -> None:
        self.now = "pro"
        self.checked: list[tuple[str, str]] = []

    async def current_tier(self, subject: str, username: str) -> str:
        self.checked.append((subject, username))
        if self.now == "gone":
            raise UserGone
        if self.now == "unavailable":
            raise UpstreamUnavailable("the user pool cannot be asked")
        return self.now

    async def login_url(self, redirect_uri: str, state: str, nonce: str, challenge: str) -> str:
        return f"https://idp.example/login?{urllib.parse.urlencode({'state': state, 'redirect_uri': redirect_uri})}"

    async def identity(self, code: str, redirect_uri: str, verifier: str, nonce: str) -> Identity:
        if code == "refused":
            raise UpstreamLoginFailed("the provider refused the code (HTTP 400)")
        if code == "unavailable":  # e.g. the upstream client's secret cannot be read
            raise botocore.exceptions.ClientError({"Error": {"Code": "AccessDeniedException"}}, "GetSecretValue")
        return Identity(subject="alice-sub", tier="pro", name="alice@example.com", username="alice")


class Documents:
    """What each client ID metadata document URL answers (bytes, or an exception raised by the fetch)."""

    def __init__(self) -> None:
        self.answers: dict[str, Any] = {}
        self.fetched: list[str] = []

    async def __call__(self, url: str) -> bytes:
        self.fetched.append(url)
        answer = self.answers[url]
        if isinstance(answer, Exception):
            raise answer
        return answer


@pytest.fixture
def environment(aws) -> LocalEnvironment:
    return LocalEnvironment(
        boto3.client,
        parameters={"AuthMode": "oauth", "AuthorizationServerMode": "builtin", "UpstreamIssuer": "https://idp.example"},
        on_demand=True,
    )


class Clock:
    """The server's clock: the real one, moved forward by the test (never a pinned instant)."""

    def __init__(self) -> None:
        self.ahead = 0.0

    def __call__(self) -> float:
        return time.time() + self.ahead


def build(
    environment: LocalEnvironment,
    documents: Documents,
    issuer: str = ISSUER,
    clock: Clock | None = None,
    upstream: Any = None,
    **overrides: str,
) -> tuple[TestClient, Any]:
    variables = environment.stack.function("AuthorizationServer").environment
    stack_urls_are(variables, issuer)
    settings = load_settings(AuthorizationServerSettings, {**variables, **overrides})
    clock = clock or Clock()
    store = AuthorizationStore(settings.authorization_table_name, boto3.client("dynamodb"), clock=clock)
    server = AuthorizationServer(
        settings,
        store,
        KmsSigner(settings.authorization_signing_key_id, boto3.client("kms")),
        upstream or StandInUpstream(),
        documents_for(settings, store, documents),
        clock=clock,
    )
    return TestClient(server, base_url=issuer, follow_redirects=False), server


def stack_urls_are(variables: dict[str, str], issuer: str = ISSUER) -> None:
    """The server's URL and the endpoint's, which the template writes to the server's parameters, are ISSUER and
    RESOURCE here (the local stack writes its loopback URLs the same way)."""
    ssm = boto3.client("ssm")
    ssm.put_parameter(Name=variables["AUTHORIZATION_ISSUER_PARAMETER"], Value=issuer, Type="String", Overwrite=True)
    ssm.put_parameter(Name=variables["AUTHORIZATION_RESOURCE_PARAMETER"], Value=RESOURCE, Type="String", Overwrite=True)


@pytest.fixture
def documents() -> Documents:
    return Documents()


@pytest.fixture
def client(environment, documents) -> TestClient:
    return build(environment, documents)[0]


def pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    return verifier, base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()


def register(client: TestClient, **metadata: Any) -> dict[str, Any]:
    body = {
        "redirect_uris": [REDIRECT],
        "token_endpoint_auth_method": "none",
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "client_name": "Test client",
        **metadata,
    }
    answer = client.post("/register", json=body)
    assert answer.status_code == 201, answer.text
    return answer.json()


def authorize(client: TestClient, client_id: str, challenge: str, **extra: str) -> Any:
    query = {
        "response_type": "code",
        "client_id": client_id,
        "redirect_uri": REDIRECT,
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        "state": "state-123",
        "scope": "read submit",
        "resource": RESOURCE,
        **extra,
    }
    return client.get("/authorize", params={k: v for k, v in query.items() if v is not None})


def consent_form(client: TestClient, client_id: str, challenge: str, **extra: str) -> tuple[Any, dict[str, str]]:
    """Authorize, come back from the upstream login: the consent page and its form's fields."""
    login = authorize(client, client_id, challenge, **extra)
    assert login.status_code == 302, login.text
    state = urllib.parse.parse_qs(urllib.parse.urlsplit(login.headers["location"]).query)["state"][0]
    page = client.get("/callback", params={"code": "upstream-code", "state": state})
    assert page.status_code == 200, page.text
    fields = dict(
        (name, value)
        for name, value in (
            (part.split('name="')[1].split('"')[0], part.split('value="')[1].split('"')[0])
            for part in page.text.split("<input")[1:]
        )
    )
    return page, fields


def sign_in(client: TestClient, client_id: str, **extra: str) -> tuple[str, str]:
    """The whole browser leg: (authorization code, PKCE verifier); the code goes to the redirect URI used."""
    verifier, challenge = pkce()
    _, fields = consent_form(client, client_id, challenge, **extra)
    answer = client.post("/consent", data={**fields, "decision": "approve"})
    assert answer.status_code == 302, answer.text
    location = urllib.parse.urlsplit(answer.headers["location"])
    assert location._replace(query="").geturl() == extra.get("redirect_uri", REDIRECT)
    query = urllib.parse.parse_qs(location.query)
    assert query["state"] == ["state-123"] and query["iss"] == [ISSUER]
    return query["code"][0], verifier


def exchange(client: TestClient, client_id: str, code: str, verifier: str, **extra: str) -> Any:
    form = {
        "grant_type": "authorization_code",
        "code": code,
        "redirect_uri": REDIRECT,
        "client_id": client_id,
        "code_verifier": verifier,
        "resource": RESOURCE,
        **extra,
    }
    return client.post("/token", data={k: v for k, v in form.items() if v is not None})


def refresh(client: TestClient, client_id: str, token: str) -> Any:
    return client.post("/token", data={"grant_type": "refresh_token", "refresh_token": token, "client_id": client_id})


def claims_of(client: TestClient, token: str) -> dict[str, Any]:
    [key] = client.get("/jwks").json()["keys"]
    return jwt.decode(token, jwt.PyJWK.from_dict(key).key, algorithms=["ES256"], audience=RESOURCE, issuer=ISSUER)


def test_the_metadata_names_the_endpoints_s256_only_public_clients_and_metadata_documents(client):
    # When a client reads the RFC 8414 metadata
    metadata = client.get("/.well-known/oauth-authorization-server").json()

    # Then it names every endpoint under the issuer, PKCE S256 only, code only, and public clients
    assert metadata["issuer"] == ISSUER
    assert {metadata[name] for name in ("registration_endpoint", "token_endpoint", "revocation_endpoint")} == {
        f"{ISSUER}/register",
        f"{ISSUER}/token",
        f"{ISSUER}/revoke",
    }
    assert metadata["code_challenge_methods_supported"] == ["S256"]
    assert metadata["response_types_supported"] == ["code"]
    assert set(metadata["grant_types_supported"]) == {"authorization_code", "refresh_token"}
    assert "none" in metadata["token_endpoint_auth_methods_supported"]
    assert metadata["client_id_metadata_document_supported"] is True
    # And it says every authorization response names the issuer (RFC 9207; sign_in checks the `iss` it gets)
    assert metadata["authorization_response_iss_parameter_supported"] is True


def test_a_registered_client_signs_a_user_in_and_gets_an_es256_token_bound_to_the_resource(client):
    # Given a client registered dynamically
    client_id = register(client)["client_id"]

    # When the user signs in and consents, and the client exchanges the code with its verifier
    code, verifier = sign_in(client, client_id)
    answer = exchange(client, client_id, code, verifier)

    # Then the access token is a JWT for the resource, with the user's subject, scopes and tier
    assert answer.status_code == 200, answer.text
    tokens = answer.json()
    assert jwt.get_unverified_header(tokens["access_token"])["alg"] == "ES256"
    claims = claims_of(client, tokens["access_token"])
    assert (claims["sub"], claims["aud"], claims["scope"], claims["tier"], claims["client_id"]) == (
        "alice-sub",
        RESOURCE,
        "read submit",
        "pro",
        client_id,
    )
    assert claims["exp"] - claims["iat"] == 600
    assert tokens["refresh_token"] and tokens["token_type"] == "Bearer"
    assert answer.headers["cache-control"] == "no-store"


def test_the_consent_page_names_the_client_its_redirect_host_and_the_scopes_and_cannot_be_framed(client):
    client_id = register(client)["client_id"]
    page, fields = consent_form(client, client_id, pkce()[1])
    assert "Test client" in page.text and "127.0.0.1" in page.text and RESOURCE in page.text
    assert "<b>read</b>" in page.text and "<b>submit</b>" in page.text
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
    assert page.headers["x-frame-options"] == "DENY"
    assert set(fields) == {"transaction", "csrf"}


def test_an_unknown_or_expired_client_gets_401_invalid_client_at_the_token_endpoint(client):
    # When a client nobody registered (or whose registration expired) asks for a token
    answer = exchange(client, "no-such-client", "code", "verifier")

    # Then it is told invalid_client with 401: the signal to register again
    assert answer.status_code == 401
    assert answer.json()["error"] == "invalid_client"


def test_an_unknown_client_or_a_mismatched_redirect_is_refused_at_authorize_without_a_redirect(client):
    client_id = register(client)["client_id"]
    unknown = authorize(client, "no-such-client", pkce()[1])
    mismatched = authorize(client, client_id, pkce()[1], redirect_uri="http://127.0.0.1:5555/other")
    assert (unknown.status_code, unknown.json()["error"]) == (400, "invalid_request")
    assert (mismatched.status_code, mismatched.json()["error"]) == (400, "invalid_request")
    assert "location" not in mismatched.headers


def test_pkce_is_required_s256_only_and_a_wrong_verifier_gets_no_token(client):
    # Given a registered client
    client_id = register(client)["client_id"]

    # When it authorizes without a challenge, with plain, and exchanges a code with the wrong verifier
    missing = authorize(client, client_id, None)
    plain = authorize(client, client_id, "x" * 43, code_challenge_method="plain")
    code, _ = sign_in(client, client_id)
    wrong = exchange(client, client_id, code, "not-the-verifier-" + "x" * 30)
    no_verifier = client.post("/token", data={"grant_type": "authorization_code", "code": code, "client_id": client_id})

    # Then: the two requests are refused back at the redirect URI, the exchanges with invalid_grant/invalid_request
    for refused in (missing, plain):
        assert refused.status_code == 302
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(refused.headers["location"]).query)
        # (an error answer names the issuer too: RFC 9207 section 2)
        assert (query["error"], query["iss"]) == (["invalid_request"], [ISSUER])
    assert (wrong.status_code, wrong.json()["error"]) == (400, "invalid_grant")
    assert (no_verifier.status_code, no_verifier.json()["error"]) == (400, "invalid_request")


def test_a_code_must_be_exchanged_with_its_redirect_uri(client):
    client_id = register(client)["client_id"]
    code, verifier = sign_in(client, client_id)
    answer = exchange(client, client_id, code, verifier, redirect_uri="http://127.0.0.1:5555/other")
    assert (answer.status_code, answer.json()["error"]) == (400, "invalid_request")


def test_a_replayed_code_is_refused_and_revokes_what_the_code_issued(client):
    # Given a code exchanged once
    client_id = register(client)["client_id"]
    code, verifier = sign_in(client, client_id)
    first = exchange(client, client_id, code, verifier).json()

    # When the code is presented again
    replay = exchange(client, client_id, code, verifier)

    # Then it is invalid_grant, and the refresh token the first exchange got no longer works
    assert (replay.status_code, replay.json()["error"]) == (400, "invalid_grant")
    assert "access_token" not in replay.json()
    assert refresh(client, client_id, first["refresh_token"]).json()["error"] == "invalid_grant"


def test_refresh_tokens_rotate_and_a_reused_one_revokes_the_family(client):
    # Given tokens from a sign-in
    client_id = register(client)["client_id"]
    code, verifier = sign_in(client, client_id)
    first = exchange(client, client_id, code, verifier).json()

    # When the refresh token is used, then used again (a thief replaying it)
    rotated = refresh(client, client_id, first["refresh_token"])
    reused = refresh(client, client_id, first["refresh_token"])
    after = refresh(client, client_id, rotated.json()["refresh_token"])

    # Then the first use rotates it, the reuse is invalid_grant, and the rotated token is revoked with its family
    assert rotated.status_code == 200 and rotated.json()["refresh_token"] != first["refresh_token"]
    assert claims_of(client, rotated.json()["access_token"])["sub"] == "alice-sub"
    assert (reused.status_code, reused.json()["error"]) == (400, "invalid_grant")
    assert (after.status_code, after.json()["error"]) == (400, "invalid_grant")


def signed_in(environment: LocalEnvironment, documents: Documents) -> tuple[TestClient, Any, str, dict[str, Any]]:
    """A server, and a registered client that signed alice in: (client, server, its client id, its tokens)."""
    client, server = build(environment, documents)
    client_id = register(client)["client_id"]
    code, verifier = sign_in(client, client_id)
    return client, server, client_id, exchange(client, client_id, code, verifier).json()


def test_a_grant_ends_its_lifetime_after_consent_however_often_it_was_refreshed(environment, documents):
    # Given a sign-in under the default grant lifetime (30 days)
    clock = Clock()
    client, _ = build(environment, documents, clock=clock)
    client_id = register(client)["client_id"]
    code, verifier = sign_in(client, client_id)
    token = exchange(client, client_id, code, verifier).json()["refresh_token"]

    # When the client refreshes on day 15 and on day 29, then on day 30 and a minute
    answers = []
    for day in (15, 29):
        clock.ahead = day * 86400
        answers.append(refresh(client, client_id, token))
        token = answers[-1].json().get("refresh_token", token)
    clock.ahead = 30 * 86400 + 60
    ended = refresh(client, client_id, token)

    # Then the refreshes within the lifetime rotate, and the one past it is invalid_grant: rotation never
    # extended the grant
    assert [answer.status_code for answer in answers] == [200, 200]
    assert (ended.status_code, ended.json()["error"]) == (400, "invalid_grant")
    assert "access_token" not in ended.json()


def test_the_grant_lifetime_is_the_template_parameter(aws, documents):
    # Given a stack deployed with AuthorizationGrantDays 2
    parameters = {
        "AuthMode": "oauth",
        "AuthorizationServerMode": "builtin",
        "UpstreamIssuer": "https://idp.example",
        "AuthorizationGrantDays": "2",
    }
    clock = Clock()
    client, _ = build(LocalEnvironment(boto3.client, parameters=parameters, on_demand=True), documents, clock=clock)
    client_id = register(client)["client_id"]
    code, verifier = sign_in(client, client_id)
    token = exchange(client, client_id, code, verifier).json()["refresh_token"]

    # When the client refreshes on the second day, then two days and a minute after consent
    clock.ahead = 86400 + 3600
    within = refresh(client, client_id, token)
    clock.ahead = 2 * 86400 + 60
    after = refresh(client, client_id, within.json()["refresh_token"])

    # Then the grant lasted the two days, no longer
    assert within.status_code == 200
    assert (after.status_code, after.json()["error"]) == (400, "invalid_grant")


def test_each_refresh_rechecks_the_user_and_issues_the_tier_found_upstream(environment, documents):
    # Given alice signed in as pro
    client, server, client_id, first = signed_in(environment, documents)
    assert claims_of(client, first["access_token"])["tier"] == "pro"

    # When she leaves the paying group upstream, and the client refreshes
    server.upstream.now = "free"
    refreshed = refresh(client, client_id, first["refresh_token"])

    # Then the provider was asked about her (by her upstream username) and the new token says free
    assert refreshed.status_code == 200
    assert claims_of(client, refreshed.json()["access_token"])["tier"] == "free"
    assert server.upstream.checked == [("alice-sub", "alice")]


@pytest.mark.parametrize(
    ("upstream", "status", "error", "retried_status"),
    [("gone", 400, "invalid_grant", 400), ("unavailable", 503, "temporarily_unavailable", 200)],
    ids=["deleted or disabled: the grant is revoked", "the pool cannot be asked: the token is not spent"],
)
def test_a_refresh_whose_user_cannot_be_confirmed_issues_nothing(environment, documents, upstream, status, error,
                                                                 retried_status):  # fmt: skip
    # Given alice signed in
    client, server, client_id, tokens = signed_in(environment, documents)

    # When the re-check finds her deleted or disabled, or cannot ask the pool; then she is fine and it retries
    server.upstream.now = upstream
    refused = refresh(client, client_id, tokens["refresh_token"])
    server.upstream.now = "pro"
    retried = refresh(client, client_id, tokens["refresh_token"])

    # Then nothing is issued, with the RFC's error and a short reason (503 with Retry-After, never a 500); a
    # gone user's grant stays revoked, while after an unanswered check the same refresh token still works
    assert (refused.status_code, refused.json()["error"]) == (status, error)
    assert "access_token" not in refused.json()
    assert refused.json()["error_description"] in ("the user can no longer sign in", "the user cannot be checked now")
    assert status == 400 or "retry-after" in refused.headers
    assert retried.status_code == retried_status


def signed_in_at(provider: OidcProvider, environment: LocalEnvironment, documents: Documents) -> tuple[Any, str, Any]:
    """A server whose upstream is another OIDC provider, and a client that signed alice in: (client, its client id,
    its tokens)."""
    client, _ = build(environment, documents, upstream=provider.upstream())
    client_id = register(client)["client_id"]
    code, verifier = sign_in(client, client_id)
    return client, client_id, exchange(client, client_id, code, verifier).json()


def table_text(environment: LocalEnvironment) -> str:
    table = environment.stack.function("AuthorizationServer").environment["AUTHORIZATION_TABLE_NAME"]
    return json.dumps(boto3.client("dynamodb").scan(TableName=table)["Items"])


def test_each_refresh_exchanges_another_providers_refresh_token_and_issues_the_tier_it_finds(
    environment, documents, capsys
):
    # Given alice signed in as pro through another OIDC provider, which gave a refresh token
    provider = OidcProvider()
    client, client_id, first = signed_in_at(provider, environment, documents)

    # When she moves to the staff group there and the client refreshes; then the provider is down for a refresh,
    # and is back for the same refresh token
    provider.groups = ["staff"]
    second = refresh(client, client_id, first["refresh_token"])
    provider.state = "down"
    down = refresh(client, client_id, second.json()["refresh_token"])
    provider.state = "up"
    retried = refresh(client, client_id, second.json()["refresh_token"])

    # Then the first refresh issued her tier today (the provider's answer to its refresh token), the one while
    # it was down is 503 with nothing issued, and the same token then works: each exchange used the provider's
    # latest (rotated) refresh token, and none of them reached the logs
    assert tiers(client, first, second.json()) == ["pro", "internal"]
    assert (down.status_code, down.json()["error"], "access_token" in down.json()) == (
        503,
        "temporarily_unavailable",
        False,
    )
    assert retried.status_code == 200 and tiers(client, retried.json()) == ["internal"]
    refreshes = [form["refresh_token"] for form in provider.seen if form["grant_type"] == "refresh_token"]
    assert refreshes == [provider.issued[0], provider.issued[1], provider.issued[1]]
    logged = capsys.readouterr()
    assert "refresh re-check unavailable" in logged.out  # the logs were captured
    assert not any(token in logged.out + logged.err for token in provider.issued)


def tiers(client: TestClient, *tokens: dict[str, Any]) -> list[str]:
    return [claims_of(client, token["access_token"])["tier"] for token in tokens]


def test_another_providers_invalid_grant_revokes_the_grant_and_drops_its_refresh_token(environment, documents):
    # Given alice signed in through another OIDC provider and refreshed once (her provider token rotated)
    provider = OidcProvider()
    client, client_id, first = signed_in_at(provider, environment, documents)
    second = refresh(client, client_id, first["refresh_token"]).json()
    assert provider.issued[-1] in table_text(environment)

    # When her access ends at the provider, and the client refreshes; then the provider would answer again
    provider.state = "ended"
    ended = refresh(client, client_id, second["refresh_token"])
    provider.state = "up"
    after = refresh(client, client_id, second["refresh_token"])

    # Then the refresh is invalid_grant, her grant stays revoked, and the table no longer holds the provider's
    # refresh token
    assert (ended.status_code, ended.json()["error"]) == (400, "invalid_grant")
    assert (after.status_code, after.json()["error"]) == (400, "invalid_grant")
    assert provider.issued[-1] not in table_text(environment)


def operator(client: TestClient, capsys: Any, *argv: str) -> tuple[int, str]:
    """`python -m mcp_backend.authorization` on the server's table: (exit status, what it printed)."""
    table = client.app.store.table_name
    status = authorization_cli.main(["--table", table, *argv])
    return status, capsys.readouterr().out


def printed(out: str, name: str) -> str:
    return next(line.split(": ", 1)[1].split()[0] for line in out.splitlines() if line.startswith(f"{name}: "))


def test_an_operator_lists_a_users_grants_and_revokes_them_all(environment, documents, capsys):
    # Given alice signed in through two clients (two grants)
    client, _ = build(environment, documents)
    tokens = []
    for _ in range(2):
        client_id = register(client)["client_id"]
        code, verifier = sign_in(client, client_id)
        tokens.append((client_id, exchange(client, client_id, code, verifier).json()["refresh_token"]))

    # When the operator lists her grants, revokes them, and lists them again
    _, listed = operator(client, capsys, "grants", "list", "--subject", "alice-sub")
    status, revoked = operator(client, capsys, "grants", "revoke", "--subject", "alice-sub")
    _, after = operator(client, capsys, "grants", "list", "--subject", "alice-sub")

    # Then both were active and are now revoked, and neither refresh token works any more
    assert listed.count(" active") == 2
    assert (status, revoked.strip()) == (0, "revoked 2 grant(s)")
    assert after.count("revoked (revoked by the operator)") == 2
    for client_id, token in tokens:
        assert refresh(client, client_id, token).json()["error"] == "invalid_grant"


@pytest.mark.parametrize("method", ["client_secret_basic", "client_secret_post"])
def test_an_operators_confidential_client_signs_in_with_its_secret_shown_once_and_kept_hashed(client, capsys, method):
    # Given a confidential client the operator added, with its fixed redirect URI
    status, out = operator(client, capsys, "clients", "add", "--name", "Ops", "--redirect-uri", REDIRECT,
                           "--auth-method", method)  # fmt: skip
    client_id, secret = printed(out, "client_id"), printed(out, "client_secret")

    def exchange_with(presented: str) -> Any:
        code, verifier = sign_in(client, client_id)
        if method == "client_secret_post":
            return exchange(client, client_id, code, verifier, client_secret=presented)
        basic = base64.b64encode(f"{client_id}:{presented}".encode()).decode()
        form = {"grant_type": "authorization_code", "code": code, "redirect_uri": REDIRECT,
                "code_verifier": verifier, "resource": RESOURCE, "client_id": client_id}  # fmt: skip
        return client.post("/token", data=form, headers={"authorization": f"Basic {basic}"})

    # When it exchanges a code with its secret, and another with a wrong one
    good, wrong = exchange_with(secret), exchange_with("not-the-secret")

    # Then the right secret gets tokens, the wrong one 401 invalid_client; the table holds only the hash
    assert status == 0 and client_id.startswith("op-")
    assert good.status_code == 200, good.text
    assert (wrong.status_code, wrong.json()["error"]) == (401, "invalid_client")
    assert secret not in json.dumps(client.app.store.get(f"client#{client_id}"))


def test_an_operators_public_client_is_listed_signs_in_and_is_gone_once_removed(client, capsys):
    # Given a public client the operator added (no secret printed)
    _, out = operator(client, capsys, "clients", "add", "--name", "Desk", "--redirect-uri", REDIRECT, "--public")
    client_id = printed(out, "client_id")
    assert "client_secret" not in out

    # When it signs in, the operator lists the clients, removes it, and it tries again
    code, verifier = sign_in(client, client_id)
    signed = exchange(client, client_id, code, verifier)
    _, listed = operator(client, capsys, "clients", "list")
    removed, _ = operator(client, capsys, "clients", "remove", "--client-id", client_id)
    again = exchange(client, client_id, *sign_in_code_only(client))
    missing, _ = operator(client, capsys, "clients", "remove", "--client-id", client_id)

    # Then it got tokens while listed, and once removed it is an unknown client (401 invalid_client)
    assert signed.status_code == 200
    assert client_id in listed and "none" in listed and REDIRECT in listed
    assert (removed, missing) == (0, 1)
    assert (again.status_code, again.json()["error"]) == (401, "invalid_client")


def sign_in_code_only(client: TestClient) -> tuple[str, str]:
    """A code and verifier of another, registered client: something to present as a removed client's."""
    return sign_in(client, register(client)["client_id"])


def test_an_operator_client_with_an_unsafe_redirect_uri_is_refused(client, capsys):
    # When the operator adds a client with a plain http redirect off loopback
    with pytest.raises(SystemExit) as exit_status:
        operator(client, capsys, "clients", "add", "--name", "X", "--redirect-uri", "http://evil.example/cb")

    # Then the command refuses it with the reason, and no client is added
    assert exit_status.value.code == 2
    assert "https, or http on a loopback host" in capsys.readouterr().err
    assert operator(client, capsys, "clients", "list")[1] == ""


def test_a_dynamically_registered_confidential_client_keeps_working_with_its_secret_hashed(client):
    # Given a client that registered for client_secret_post and was given a secret
    registered = register(client, token_endpoint_auth_method="client_secret_post")
    client_id, secret = registered["client_id"], registered["client_secret"]

    # When it exchanges a code with that secret
    code, verifier = sign_in(client, client_id)
    answer = exchange(client, client_id, code, verifier, client_secret=secret)

    # Then it gets tokens, and the table holds the secret's hash only
    assert answer.status_code == 200, answer.text
    assert secret not in json.dumps(client.app.store.get(f"client#{client_id}"))


def test_revoking_a_refresh_or_access_token_ends_the_grant(client):
    client_id = register(client)["client_id"]
    for kind in ("refresh_token", "access_token"):
        code, verifier = sign_in(client, client_id)
        tokens = exchange(client, client_id, code, verifier).json()
        revoked = client.post("/revoke", data={"token": tokens[kind], "client_id": client_id})
        assert revoked.status_code == 200
        assert refresh(client, client_id, tokens["refresh_token"]).json()["error"] == "invalid_grant"


def test_registration_refuses_unsafe_redirect_uris(environment, documents):
    # Given a server whose https redirects are limited to claude.ai
    client = build(environment, documents, AUTHORIZATION_REDIRECT_HOSTS="claude.ai")[0]
    cases = {
        "http://attacker.example/cb": "invalid_redirect_uri",
        "https://attacker.example/cb": "invalid_redirect_uri",
        "https://claude.ai/cb#fragment": "invalid_redirect_uri",
        "javascript:alert(1)": "invalid_redirect_uri",
    }
    for uri, error in cases.items():
        answer = client.post("/register", json={"redirect_uris": [uri], "token_endpoint_auth_method": "none"})
        assert (answer.status_code, answer.json()["error"]) == (400, error), uri
    # And loopback http and the allowed host are accepted
    for uri in ("http://localhost:1234/cb", "http://[::1]:9/cb", "https://claude.ai/api/mcp/auth_callback"):
        assert client.post("/register", json={"redirect_uris": [uri]}).status_code == 201, uri


def test_cursors_registration_with_its_private_use_redirect_is_accepted_and_other_schemes_are_not(client):
    # Given the redirect URIs Cursor registers: its private-use scheme, its https callback and a loopback one
    cursor = [
        "cursor://anysphere.cursor-mcp/oauth/callback",
        "https://www.cursor.com/agents/mcp/oauth/callback",
        "http://localhost:8787/callback",
    ]

    # When Cursor registers, and clients register other private-use URIs
    accepted = client.post("/register", json={"redirect_uris": cursor, "token_endpoint_auth_method": "none"})
    refused = [
        client.post("/register", json={"redirect_uris": [uri], "token_endpoint_auth_method": "none"})
        for uri in (
            "cursor://anysphere.cursor-mcp/oauth/other",
            "cursor://anysphere.cursor-mcp/oauth/callback#fragment",
            "evilapp://anysphere.cursor-mcp/oauth/callback",
        )
    ]

    # Then Cursor is registered with all three, and only the listed URI, exactly, is accepted
    assert accepted.status_code == 201, accepted.text
    assert [str(uri) for uri in accepted.json()["redirect_uris"]] == cursor
    assert [(r.status_code, r.json()["error"]) for r in refused] == [(400, "invalid_redirect_uri")] * 3


def from_source(address: str, **headers: str) -> dict[str, str]:
    """The headers of a request Lambda saw from `address`: the Web Adapter's request context, and any others."""
    context = {"requestId": secrets.token_hex(8), "http": {"method": "POST", "path": "/register", "sourceIp": address}}
    return {"x-amzn-request-context": json.dumps(context), **headers}


def test_a_registration_flood_from_one_source_is_rate_limited(environment, documents):
    # Given a limit of 3 registrations per source and hour
    client = build(environment, documents, REGISTRATIONS_PER_HOUR="3")[0]
    body = {"redirect_uris": [REDIRECT], "token_endpoint_auth_method": "none"}

    # When one source registers five times
    answers = [client.post("/register", json=body, headers=from_source("203.0.113.7")) for _ in range(5)]

    # Then the fourth and fifth are 429 with Retry-After and register nothing; another source still can
    assert [answer.status_code for answer in answers] == [201, 201, 201, 429, 429]
    assert answers[3].headers["retry-after"] == "3600" and "client_id" not in answers[3].json()
    assert client.post("/register", json=body, headers=from_source("198.51.100.1")).status_code == 201


def test_the_limit_keys_on_the_address_lambda_saw_never_on_x_forwarded_for(environment, documents):
    # Given a limit of 3 registrations per source and hour
    client = build(environment, documents, REGISTRATIONS_PER_HOUR="3")[0]
    body = {"redirect_uris": [REDIRECT], "token_endpoint_auth_method": "none"}

    # When one source sends 40 registrations, each with another X-Forwarded-For
    answers = [
        client.post("/register", json=body, headers=from_source("203.0.113.7", **{"x-forwarded-for": f"10.0.0.{n}"}))
        for n in range(40)
    ]

    # Then only 3 pass: the header the client wrote counts for nothing
    assert sum(answer.status_code == 201 for answer in answers) == 3


def test_an_ipv6_source_is_limited_by_its_64(environment, documents):
    # Given a limit of 2 registrations per source and hour
    client = build(environment, documents, REGISTRATIONS_PER_HOUR="2")[0]
    body = {"redirect_uris": [REDIRECT], "token_endpoint_auth_method": "none"}

    # When three addresses of one /64 register, then an address of another /64
    same = [client.post("/register", json=body, headers=from_source(f"2001:db8:1:2::{n}")) for n in (1, 2, 3)]
    other = client.post("/register", json=body, headers=from_source("2001:db8:1:3::1"))

    # Then the third of the /64 is refused, and the other /64 is not
    assert [answer.status_code for answer in same] == [201, 201, 429]
    assert other.status_code == 201


def test_registrations_have_a_cap_for_the_whole_server(environment, documents):
    # Given 3 registrations per source and 4 for the whole server per hour
    client = build(environment, documents, REGISTRATIONS_PER_HOUR="3", REGISTRATIONS_PER_HOUR_TOTAL="4")[0]
    body = {"redirect_uris": [REDIRECT], "token_endpoint_auth_method": "none"}

    # When four sources register twice each
    answers = [
        client.post("/register", json=body, headers=from_source(f"198.51.100.{n}")).status_code
        for n in (1, 2, 3, 4)
        for _ in range(2)
    ]

    # Then the first four pass and every later one is 429, whatever its source
    assert answers == [201] * 4 + [429] * 4


@pytest.mark.parametrize(
    ("metadata", "named"),
    [
        ({"client_name": "x" * 201}, "client_name is over 200 characters"),
        ({"redirect_uris": [f"http://127.0.0.1:{5000 + n}/cb" for n in range(11)]}, "more than 10 URIs"),
        ({"redirect_uris": ["https://app.example/" + "a" * 2048]}, "redirect URI is over 2048 characters"),
        ({"client_name": "x" * 450_000}, "body is over 16384 bytes"),
        ({"software_statement": "x" * 450_000}, "body is over 16384 bytes"),
    ],
    ids=["long client_name", "11 redirect URIs", "a long redirect URI", "a 450 KB name", "a 450 KB other field"],
)
def test_registration_metadata_over_a_size_cap_is_400_invalid_client_metadata(client, metadata, named):
    # Given registration metadata with one field over its cap
    body = {"redirect_uris": [REDIRECT], "token_endpoint_auth_method": "none", **metadata}

    # When it is registered
    answer = client.post("/register", json=body, headers=from_source("203.0.113.9"))

    # Then it is refused with 400 invalid_client_metadata naming the cap (never the value), and nothing registered
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"] == "invalid_client_metadata" and named in answer.json()["error_description"]
    assert "client_id" not in answer.json() and "xxxx" not in answer.text


def test_a_registration_body_that_is_not_a_json_object_is_400(client):
    # When the body is not JSON, JSON but not an object, nested 16,000 deep, or not UTF-8
    answers = [
        client.post(
            "/register", content=body, headers={"content-type": "application/json", **from_source("203.0.113.9")}
        )
        for body in (b"{not json", b"[1, 2]", b"[" * 16000, b'{"client_name": "\xff"}')
    ]
    # Then each (deeply nested, or not UTF-8, included) is 400 invalid_client_metadata, never a 500
    assert [(a.status_code, a.json()["error"]) for a in answers] == [(400, "invalid_client_metadata")] * 4


def test_a_client_id_metadata_document_client_signs_in(client, documents):
    # Given a client known only by its metadata document's URL
    documents.answers[CIMD_URL] = json.dumps(
        {"client_id": CIMD_URL, "client_name": "Doc client", "redirect_uris": [REDIRECT]}
    ).encode()

    # When it goes through the flow with its URL as client_id
    verifier, challenge = pkce()
    page, fields = consent_form(client, CIMD_URL, challenge)
    redirect = client.post("/consent", data={**fields, "decision": "approve"}).headers["location"]
    code = urllib.parse.parse_qs(urllib.parse.urlsplit(redirect).query)["code"][0]
    answer = exchange(client, CIMD_URL, code, verifier)

    # Then the consent names it, it gets a token for its URL, and the document was fetched once (cached)
    assert "Doc client" in page.text
    assert answer.status_code == 200, answer.text
    assert claims_of(client, answer.json()["access_token"])["client_id"] == CIMD_URL
    assert documents.fetched == [CIMD_URL]


@pytest.mark.parametrize(
    "answer",
    [
        PrivateAddress("resolves to a private or reserved address"),
        b"x" * (8 * 1024 + 1),
        b"{not json",
        json.dumps({"client_id": "https://other.example/c.json", "redirect_uris": [REDIRECT]}).encode(),
        json.dumps({"client_id": CIMD_URL, "redirect_uris": ["http://attacker.example/cb"]}).encode(),
        json.dumps(
            {"client_id": CIMD_URL, "redirect_uris": [REDIRECT], "token_endpoint_auth_method": "client_secret_post"}
        ).encode(),
    ],
    ids=["private-address", "oversized", "malformed", "other-client-id", "unsafe-redirect", "secret-method"],
)
def test_a_refused_metadata_document_gets_no_code_and_no_token(client, documents, answer):
    # Given a client_id URL whose document cannot be used
    documents.answers[CIMD_URL] = answer

    # When a client authorizes and asks for a token with it
    authorized = authorize(client, CIMD_URL, pkce()[1])
    token = exchange(client, CIMD_URL, "code", "verifier")

    # Then authorize refuses it without a redirect, and the token endpoint says invalid_client
    assert (authorized.status_code, authorized.json()["error"]) == (400, "invalid_request")
    assert (token.status_code, token.json()["error"]) == (401, "invalid_client")


@pytest.mark.parametrize("url", ["https://10.0.0.5/client.json", "https://169.254.169.254/latest/meta-data/x"])
def test_the_real_fetch_refuses_private_addresses_before_connecting(url):
    # Given the metadata documents with the network-safety rules (no stub)
    found = asyncio.run(MetadataDocuments(()).client(url))

    # Then the document is refused without a connection
    assert found is None


def test_the_real_fetch_refuses_a_name_that_resolves_to_a_private_address(monkeypatch):
    # Given a resolver that answers a private address for the client's host
    monkeypatch.setattr("socket.getaddrinfo", lambda *args, **kwargs: [(2, 1, 6, "", ("192.168.1.20", 443))])

    # Then the document is refused
    assert asyncio.run(MetadataDocuments(()).client(CIMD_URL)) is None


def test_consent_needs_the_cookie_and_the_form_token_and_deny_reports_access_denied(client):
    client_id = register(client)["client_id"]
    _, fields = consent_form(client, client_id, pkce()[1])

    # When the form is posted without the cookie, with another token, or from another origin
    cookie = client.cookies.get("mcp_consent")
    client.cookies.clear()
    without_cookie = client.post("/consent", data={**fields, "decision": "approve"})
    client.cookies.set("mcp_consent", cookie, domain="auth.example")
    forged = client.post("/consent", data={**fields, "csrf": "forged", "decision": "approve"})
    cross_origin = client.post(
        "/consent", data={**fields, "decision": "approve"}, headers={"origin": "https://attacker.example"}
    )
    denied = client.post("/consent", data={**fields, "decision": "deny"})
    again = client.post("/consent", data={**fields, "decision": "approve"})

    # Then the first three are refused, deny goes back with access_denied and the state, and the form is spent
    assert [r.status_code for r in (without_cookie, forged, cross_origin)] == [403, 403, 403]
    assert denied.status_code == 302
    assert "error=access_denied" in denied.headers["location"] and "state=state-123" in denied.headers["location"]
    assert again.status_code == 403


def test_a_consent_form_over_its_body_cap_is_413_and_leaves_the_form_unspent(client):
    # Given a signed-in user's consent form
    client_id = register(client)["client_id"]
    _, fields = consent_form(client, client_id, pkce()[1])
    padded = urllib.parse.urlencode({**fields, "decision": "approve", "padding": "x" * CONSENT_MAX_BODY_BYTES})

    # When it is posted past the cap, with its length declared and streamed without one
    headers = {"content-type": "application/x-www-form-urlencoded"}
    declared = client.post("/consent", content=padded, headers=headers)
    streamed = client.post("/consent", content=iter([padded[:8192].encode(), padded[8192:].encode()]), headers=headers)

    # Then both are 413 before the form is read, and the form itself is still answered once
    assert [declared.status_code, streamed.status_code] == [413, 413]
    assert client.post("/consent", data={**fields, "decision": "approve"}).status_code == 302


def test_a_failed_upstream_login_goes_back_with_access_denied(client):
    client_id = register(client)["client_id"]
    login = authorize(client, client_id, pkce()[1])
    state = urllib.parse.parse_qs(urllib.parse.urlsplit(login.headers["location"]).query)["state"][0]
    answer = client.get("/callback", params={"code": "refused", "state": state})
    assert answer.status_code == 302 and "error=access_denied" in answer.headers["location"]
    assert client.get("/callback", params={"code": "upstream-code", "state": state}).status_code == 400


def test_an_unavailable_upstream_login_goes_back_with_temporarily_unavailable_not_a_500(client):
    # Given a sign-in whose upstream step fails for a reason of this server's (an AWS call refused)
    client_id = register(client)["client_id"]
    login = authorize(client, client_id, pkce()[1])
    state = urllib.parse.parse_qs(urllib.parse.urlsplit(login.headers["location"]).query)["state"][0]

    # When the browser comes back from the login
    answer = client.get("/callback", params={"code": "unavailable", "state": state})

    # Then the client is told temporarily_unavailable (RFC 6749 section 4.1.2.1) with its state, and the
    # sign-in is spent
    assert answer.status_code == 302
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(answer.headers["location"]).query)
    assert query["error"] == ["temporarily_unavailable"] and query["state"] == ["state-123"]
    assert client.get("/callback", params={"code": "upstream-code", "state": state}).status_code == 400


def test_a_resource_outside_the_allowed_list_is_invalid_target(environment, documents):
    client = build(environment, documents, AUTHORIZATION_RESOURCES=RESOURCE)[0]
    client_id = register(client)["client_id"]
    answer = authorize(client, client_id, pkce()[1], resource="https://other.example/mcp")
    assert answer.status_code == 302 and "error=invalid_target" in answer.headers["location"]


def test_the_template_hands_the_server_the_endpoints_url(environment):
    # Given the stack as deployed: the parameter the template writes for the server
    variables = environment.stack.function("AuthorizationServer").environment
    written = boto3.client("ssm").get_parameter(Name=variables["AUTHORIZATION_RESOURCE_PARAMETER"])

    # Then it holds the endpoint's URL: its Function URL and the endpoint's path
    function_url = environment.stack.ensure("McpServerUrl").attributes["FunctionUrl"]
    assert written["Parameter"]["Value"] == f"{function_url}mcp"


def test_a_client_that_sends_no_resource_gets_a_token_for_this_stacks_endpoint(client):
    # Given a client written to an earlier spec revision: no resource at /authorize nor at /token
    client_id = register(client)["client_id"]

    # When it signs a user in
    code, verifier = sign_in(client, client_id, resource=None)
    answer = exchange(client, client_id, code, verifier, resource=None)

    # Then its token's audience is this stack's endpoint (claims_of checks the audience)
    assert answer.status_code == 200, answer.text
    assert claims_of(client, answer.json()["access_token"])["aud"] == RESOURCE


def test_an_unreadable_endpoint_url_is_temporarily_unavailable_not_a_500(environment, documents):
    # Given a server whose endpoint parameter cannot be read
    client = build(environment, documents)[0]
    variables = environment.stack.function("AuthorizationServer").environment
    boto3.client("ssm").delete_parameter(Name=variables["AUTHORIZATION_RESOURCE_PARAMETER"])
    client_id = register(client)["client_id"]

    # When a client authorizes without a resource
    answer = authorize(client, client_id, pkce()[1], resource=None)

    # Then it goes back with temporarily_unavailable (RFC 6749 section 4.1.2.1), and nothing is issued
    assert answer.status_code == 302 and "error=temporarily_unavailable" in answer.headers["location"]
    assert "code=" not in answer.headers["location"]


def test_a_resource_that_is_not_this_stacks_endpoint_is_invalid_target(client):
    # Given the default configuration (no AuthorizationResources): the endpoint's URL is the one resource
    client_id = register(client)["client_id"]

    # When a client asks for a token for another resource
    answer = authorize(client, client_id, pkce()[1], resource="https://other.example/mcp")

    # Then it goes back with invalid_target (RFC 8707 section 2) and nothing is issued
    assert answer.status_code == 302 and "error=invalid_target" in answer.headers["location"]
    assert "code=" not in answer.headers["location"]


def test_no_token_code_or_secret_reaches_the_logs(client, capsys):
    # Given a whole flow, a replay and a reuse (both logged)
    registered = register(client, token_endpoint_auth_method="client_secret_post")
    client_id, secret = registered["client_id"], registered["client_secret"]
    code, verifier = sign_in(client, client_id)
    tokens = exchange(client, client_id, code, verifier, client_secret=secret).json()
    exchange(client, client_id, code, verifier, client_secret=secret)
    for _ in range(2):
        client.post(
            "/token",
            data={
                "grant_type": "refresh_token",
                "refresh_token": tokens["refresh_token"],
                "client_id": client_id,
                "client_secret": secret,
            },
        )

    # Then nothing logged carries any of them
    logged = capsys.readouterr()
    for value in (code, verifier, secret, tokens["access_token"], tokens["refresh_token"]):
        assert value not in logged.out + logged.err


def test_tiers_come_from_the_highest_mapped_group():
    tiers = {"paying": "pro", "staff": "internal"}
    assert tier_of(["paying", "staff"], tiers) == "internal"
    assert tier_of(["paying"], tiers) == "pro"
    assert tier_of(["other"], tiers) == "free"
    assert tier_of(None, tiers) == "free"


# Redirect URIs as the clients people use send them

CLAUDE_CODE_DOCUMENT = {  # Claude Code's published client ID metadata document: loopback callbacks, no port
    "client_id": CIMD_URL,
    "client_name": "Claude Code",
    "redirect_uris": ["http://localhost/callback", "http://127.0.0.1/callback"],
    "grant_types": ["authorization_code", "refresh_token"],
    "response_types": ["code"],
    "token_endpoint_auth_method": "none",
}
VSCODE_REDIRECTS = ["http://127.0.0.1:33418", "https://vscode.dev/redirect"]  # VS Code's registration


def test_claude_codes_document_signs_in_on_whatever_port_it_listens_on(client, documents):
    # Given Claude Code's metadata document, whose loopback redirect URIs name no port
    documents.answers[CIMD_URL] = json.dumps(CLAUDE_CODE_DOCUMENT).encode()

    # When it signs in through localhost and through 127.0.0.1, each on a port picked at run time
    for used in ("http://localhost:5990/callback", "http://127.0.0.1:61234/callback"):
        code, verifier = sign_in(client, CIMD_URL, redirect_uri=used)
        answer = exchange(client, CIMD_URL, code, verifier, redirect_uri=used)

        # Then the code comes back on that port (sign_in checks it) and is exchanged for a token
        assert answer.status_code == 200, answer.text
        assert claims_of(client, answer.json()["access_token"])["client_id"] == CIMD_URL


def test_vscodes_registration_signs_in_when_its_default_port_is_taken(client):
    # Given VS Code's dynamic registration: a loopback redirect on port 33418 and vscode.dev
    client_id = register(client, redirect_uris=VSCODE_REDIRECTS)["client_id"]

    # When port 33418 is busy and it listens on another one
    code, verifier = sign_in(client, client_id, redirect_uri="http://127.0.0.1:50123/")
    answer = exchange(client, client_id, code, verifier, redirect_uri="http://127.0.0.1:50123/")

    # Then it signs in on that port
    assert answer.status_code == 200, answer.text


@pytest.mark.parametrize(
    "used",
    [
        "https://vscode.dev:8443/redirect",  # https: exact, port included
        "http://127.0.0.1:50123/other",  # loopback: any port, but the same path
        "http://127.0.0.1:50123/?next=x",  # and the same query
        "http://localhost:50123/",  # and the same host: localhost is not 127.0.0.1
        "http://[::1]:50123/",
        "http://127.0.0.2:50123/",
    ],
)
def test_a_redirect_differing_in_more_than_a_loopback_port_is_refused_at_authorize(client, used):
    # Given VS Code's registration
    client_id = register(client, redirect_uris=VSCODE_REDIRECTS)["client_id"]

    # When it asks to be sent elsewhere than a registered URI on another loopback port
    answer = authorize(client, client_id, pkce()[1], redirect_uri=used)

    # Then it is refused without a redirect, and the answer does not echo the URI
    assert (answer.status_code, answer.json()["error"]) == (400, "invalid_request")
    assert "location" not in answer.headers and used not in answer.text


def test_the_token_request_must_name_the_loopback_port_used_at_authorize(client, documents):
    # Given a code issued to Claude Code on port 5990
    documents.answers[CIMD_URL] = json.dumps(CLAUDE_CODE_DOCUMENT).encode()
    code, verifier = sign_in(client, CIMD_URL, redirect_uri="http://localhost:5990/callback")

    # When the token request names another port (also allowed at /authorize)
    answer = exchange(client, CIMD_URL, code, verifier, redirect_uri="http://localhost:5991/callback")

    # Then it is refused: the token request repeats the authorize request's URI exactly (RFC 6749 4.1.3)
    assert (answer.status_code, answer.json()["error"]) == (400, "invalid_request")
    assert "access_token" not in answer.json()


# Scopes: only those this server knows


def test_a_document_cannot_grant_itself_a_scope_the_server_does_not_know(client, documents):
    # Given a metadata document that lists an invented scope besides read
    documents.answers[CIMD_URL] = json.dumps(
        {**CLAUDE_CODE_DOCUMENT, "redirect_uris": [REDIRECT], "scope": "read admin:everything"}
    ).encode()

    # When the client asks for it, and for read and submit
    verifier, challenge = pkce()
    page, fields = consent_form(client, CIMD_URL, challenge, scope="admin:everything read submit")
    redirect = client.post("/consent", data={**fields, "decision": "approve"}).headers["location"]
    code = urllib.parse.parse_qs(urllib.parse.urlsplit(redirect).query)["code"][0]
    answer = exchange(client, CIMD_URL, code, verifier)

    # Then the consent page and the token name read only: known, and listed by the document
    assert "admin" not in page.text and "<b>read</b>" in page.text and "<b>submit</b>" not in page.text
    assert answer.json()["scope"] == "read"
    assert claims_of(client, answer.json()["access_token"])["scope"] == "read"


def test_a_request_for_unknown_scopes_only_is_invalid_scope(client, documents):
    # Given a registered client and a document listing only an invented scope
    client_id = register(client)["client_id"]
    documents.answers[CIMD_URL] = json.dumps(
        {**CLAUDE_CODE_DOCUMENT, "redirect_uris": [REDIRECT], "scope": "admin"}
    ).encode()

    # When each asks for scopes the server does not know (the document: with no scope, its own list)
    registered = authorize(client, client_id, pkce()[1], scope="admin")
    document = authorize(client, CIMD_URL, pkce()[1], scope=None)

    # Then both go back to the redirect URI with invalid_scope (RFC 6749 4.1.2.1)
    for answer in (registered, document):
        assert answer.status_code == 302
        assert "error=invalid_scope" in answer.headers["location"]


def test_a_registration_asking_for_an_unknown_scope_is_refused(client):
    # When a client registers with a scope besides read
    answer = client.post("/register", json={"redirect_uris": [REDIRECT], "scope": "read admin"})

    # Then the registration is refused (RFC 7591 section 3.2.2) and names no client
    assert (answer.status_code, answer.json()["error"]) == (400, "invalid_client_metadata")
    assert "client_id" not in answer.json()


def test_the_servers_scopes_are_the_endpoints_tool_access_levels():
    # The endpoint checks Access values as scopes: the server grants exactly those
    assert set(SCOPES) == {access.value for access in Access}


# Client ID metadata documents that cannot be fetched


@pytest.mark.parametrize(
    "fault",
    [
        httpx2.ConnectTimeout("timed out"),
        ProbeProtocolError("an answer came in a content coding the probe does not decode"),
        OSError("connection reset"),
    ],
    ids=["timeout", "bad-content-coding", "os-error"],
)
def test_a_document_that_cannot_be_fetched_is_refused_with_a_reason_fetched_once(client, documents, fault):
    # Given a client_id URL whose host fails
    documents.answers[CIMD_URL] = fault

    # When a client authorizes twice and asks for a token with it
    first = authorize(client, CIMD_URL, pkce()[1])
    second = authorize(client, CIMD_URL, pkce()[1])
    token = exchange(client, CIMD_URL, "code", "verifier")

    # Then authorize says why with 400 invalid_request (no 500), the token endpoint says invalid_client, the
    # fault's own text is not shown, and the host was asked once
    for answer in (first, second):
        assert (answer.status_code, answer.json()["error"]) == (400, "invalid_request")
        assert "could not be fetched" in answer.json()["error_description"]
        assert str(fault) not in answer.text
    assert (token.status_code, token.json()["error"]) == (401, "invalid_client")
    assert documents.fetched == [CIMD_URL]


def test_a_refused_document_is_fetched_again_after_the_failure_window():
    # Given a document host that fails, then recovers, and a clock
    documents, now = Documents(), [1000.0]
    documents.answers[CIMD_URL] = httpx2.ConnectError("refused")
    cache = MetadataDocuments((), fetch=documents, clock=lambda: now[0])

    # When the client is looked up, again within the window, and again after it
    first = asyncio.run(cache.client(CIMD_URL))
    documents.answers[CIMD_URL] = json.dumps({**CLAUDE_CODE_DOCUMENT, "redirect_uris": [REDIRECT]}).encode()
    within = asyncio.run(cache.client(CIMD_URL))
    now[0] += FAILURE_CACHE_SECONDS + 1
    after = asyncio.run(cache.client(CIMD_URL))

    # Then the failure is remembered for the window only
    assert first is None and within is None and after is not None
    assert documents.fetched == [CIMD_URL, CIMD_URL]


def document_at(url: str) -> bytes:
    return json.dumps({"client_id": url, "client_name": "Doc client", "redirect_uris": [REDIRECT]}).encode()


def authorize_from(client: TestClient, source: str, client_id: str) -> Any:
    """/authorize as a browser at `source` sends it (Lambda's request context names the address)."""
    query = {
        "response_type": "code",
        "client_id": client_id,
        "redirect_uri": REDIRECT,
        "code_challenge": pkce()[1],
        "code_challenge_method": "S256",
        "state": "state-123",
        "resource": RESOURCE,
    }
    return client.get("/authorize", params=query, headers=from_source(source))


def test_document_fetches_are_limited_per_source_with_429_and_retry_after(environment, documents):
    # Given 2 document fetches per source and minute, and documents on four hosts
    client = build(environment, documents, CLIENT_DOCUMENT_FETCHES_PER_MINUTE="2")[0]
    urls = [f"https://client{n}.example/oauth/client.json" for n in range(4)]
    for url in urls:
        documents.answers[url] = document_at(url)

    # When one source (an IPv6 /64, two of its addresses) authorizes with each, then another source with the last
    answers = [authorize_from(client, f"2001:db8:1:2::{n % 2 + 1}", url) for n, url in enumerate(urls)]
    other = authorize_from(client, "203.0.113.9", urls[3])

    # Then the third and fourth are 429 temporarily_unavailable with Retry-After, and their hosts were not asked;
    # the other source's fetch passes
    assert [answer.status_code for answer in answers] == [302, 302, 429, 429]
    refused = answers[2]
    assert refused.json()["error"] == "temporarily_unavailable"
    assert "client metadata document" in refused.json()["error_description"]
    assert 1 <= int(refused.headers["retry-after"]) <= 60
    assert other.status_code == 302
    assert documents.fetched == [urls[0], urls[1], urls[3]]


def test_document_fetches_are_limited_per_document_host(environment, documents):
    # Given 2 document fetches per document host and minute, and three documents on one host
    client = build(environment, documents, CLIENT_DOCUMENT_FETCHES_PER_MINUTE_PER_HOST="2")[0]
    urls = [f"https://client.example/oauth/{n}.json" for n in range(3)] + ["https://other.example/oauth/c.json"]
    for url in urls:
        documents.answers[url] = document_at(url)

    # When four sources authorize, each with the next document
    answers = [authorize_from(client, f"198.51.100.{n}", url) for n, url in enumerate(urls)]

    # Then the host's third document is 429 with Retry-After and not fetched; another host still is
    assert [answer.status_code for answer in answers] == [302, 302, 429, 302]
    assert answers[2].json()["error"] == "temporarily_unavailable" and "retry-after" in answers[2].headers
    assert documents.fetched == [urls[0], urls[1], urls[3]]


@pytest.mark.parametrize(
    ("path", "form"),
    [
        ("/token", {"grant_type": "refresh_token", "refresh_token": "a-refresh-token"}),
        ("/token", {"grant_type": "authorization_code", "code": "a-code", "code_verifier": "v" * 43}),
        ("/revoke", {"token": "a-refresh-token"}),
    ],
    ids=["token-refresh", "token-code", "revoke"],
)
def test_a_fetch_limit_at_token_and_revoke_is_429_with_retry_after_not_invalid_client(
    environment, documents, path, form
):
    # Given one document fetch per source and minute, spent by an authorization with another client's document
    client = build(environment, documents, CLIENT_DOCUMENT_FETCHES_PER_MINUTE="1")[0]
    other = "https://other.example/oauth/client.json"
    for url in (CIMD_URL, other):
        documents.answers[url] = document_at(url)
    assert authorize_from(client, "203.0.113.7", other).status_code == 302

    # When the same source calls the endpoint as a client whose document is not cached
    answer = client.post(path, data={**form, "client_id": CIMD_URL}, headers=from_source("203.0.113.7"))

    # Then it is told to come back later (429 temporarily_unavailable with Retry-After), not that the client is
    # invalid (401 invalid_client would make a client drop its credentials), and the document was not fetched
    assert answer.status_code == 429
    assert answer.json()["error"] == "temporarily_unavailable"
    assert 1 <= int(answer.headers["retry-after"]) <= 60
    assert answer.headers["cache-control"] == "no-store"
    assert documents.fetched == [other]


def test_cached_documents_and_cached_failures_do_not_count_against_the_fetch_limits(environment, documents):
    # Given 2 fetches per source and per host a minute, a document that serves and one whose host fails
    client = build(
        environment,
        documents,
        CLIENT_DOCUMENT_FETCHES_PER_MINUTE="2",
        CLIENT_DOCUMENT_FETCHES_PER_MINUTE_PER_HOST="2",
    )[0]
    failing = "https://client.example/oauth/gone.json"
    documents.answers[CIMD_URL] = document_at(CIMD_URL)
    documents.answers[failing] = httpx2.ConnectError("refused")

    # When one source authorizes with each five times
    served = [authorize_from(client, "203.0.113.7", CIMD_URL).status_code for _ in range(5)]
    failed = [authorize_from(client, "203.0.113.7", failing).status_code for _ in range(5)]

    # Then every answer is the cached one (served, or 400 with its reason), never 429: each was fetched once
    assert served == [302] * 5 and failed == [400] * 5
    assert documents.fetched == [CIMD_URL, failing]


def login_state(login: Any) -> str:
    return urllib.parse.parse_qs(urllib.parse.urlsplit(login.headers["location"]).query)["state"][0]


def headline(page: Any) -> str:
    return str(page.text.split("<h1>")[1].split("</h1>")[0])


def test_the_template_writes_the_servers_issuer_where_it_reads_it(environment):
    # Given the stack as deployed: the issuer parameter the template writes for the server
    variables = environment.stack.function("AuthorizationServer").environment
    written = boto3.client("ssm").get_parameter(Name=variables["AUTHORIZATION_ISSUER_PARAMETER"])

    # Then it holds the server's Function URL without the trailing slash: the issuer the endpoint trusts
    function_url = environment.stack.ensure("AuthorizationServerUrl").attributes["FunctionUrl"]
    assert written["Parameter"]["Value"] == function_url.rstrip("/")
    assert environment.stack.function("McpServer").environment["OAUTH_ISSUER"] == function_url.rstrip("/")


@pytest.mark.parametrize("host", ["auth.example", "abc123.lambda-url.us-east-1.on.aws", "attacker.example"])
def test_the_issuer_is_the_pinned_one_whatever_host_the_request_names(client, host):
    # When a client reads the metadata through any Host (another Function URL of the region included)
    answer = client.get("/.well-known/oauth-authorization-server", headers={"host": host})

    # Then it is told the pinned issuer and endpoints under it, never one made of the Host
    assert answer.status_code == 200
    metadata = answer.json()
    assert (metadata["issuer"], metadata["token_endpoint"]) == (ISSUER, f"{ISSUER}/token")


def test_authorize_on_another_host_is_sent_to_the_issuers_host_first(client):
    # Given a registered client
    client_id = register(client)["client_id"]

    # When its authorization request reaches the server through another Host
    answer = client.get(
        "/authorize", params={"client_id": client_id, "state": "s"}, headers={"host": "abc.lambda-url.us-east-1.on.aws"}
    )

    # Then the browser is sent to the same request at the issuer, and no sign-in was started
    assert answer.status_code == 307
    assert answer.headers["location"] == f"{ISSUER}/authorize?client_id={client_id}&state=s"
    assert "set-cookie" not in answer.headers


EDGE_ISSUER = "https://mcp.example.com"
EDGE_PARAMETERS = {
    "Edge": "CloudFront",
    "CustomDomainName": "mcp.example.com",
    "CertificateArn": "arn:aws:acm:us-east-1:123456789012:certificate/abc-123",
}


@pytest.fixture
def behind_the_edge(aws) -> LocalEnvironment:
    """The stack with the edge on a custom domain: the server's issuer is the domain, CloudFront's origin header
    its secret."""
    return LocalEnvironment(
        boto3.client,
        parameters={
            "AuthMode": "oauth",
            "AuthorizationServerMode": "builtin",
            "UpstreamIssuer": "https://idp.example",
            **EDGE_PARAMETERS,
        },
        on_demand=True,
    )


def test_behind_the_edge_the_metadata_names_the_custom_domain_and_a_request_around_the_edge_is_refused(
    behind_the_edge, documents
):
    # Given the server as the template configures it behind the edge: the issuer it reads is the custom domain
    variables = behind_the_edge.stack.function("AuthorizationServer").environment
    written = boto3.client("ssm").get_parameter(Name=variables["AUTHORIZATION_ISSUER_PARAMETER"])["Parameter"]["Value"]
    assert written == EDGE_ISSUER
    client, _ = build(behind_the_edge, documents, issuer=written)
    origin_value = json.loads(
        boto3.client("secretsmanager").get_secret_value(SecretId=variables["EDGE_ORIGIN_SECRET_ID"])["SecretString"]
    )["current"]
    # CloudFront forwards with the origin's Host (the Function URL's) and its origin header
    through_edge = {"host": "abc123.lambda-url.us-east-1.on.aws", "x-origin-verify": origin_value}

    # When a client reads the RFC 8414 metadata through the edge
    answer = client.get("/.well-known/oauth-authorization-server", headers=through_edge)

    # Then the issuer and every endpoint are on the custom domain
    assert answer.status_code == 200
    metadata = answer.json()
    assert metadata["issuer"] == EDGE_ISSUER
    endpoints = ("authorization_endpoint", "token_endpoint", "registration_endpoint", "revocation_endpoint")
    assert {name: metadata[name] for name in endpoints} == {
        "authorization_endpoint": f"{EDGE_ISSUER}/authorize",
        "token_endpoint": f"{EDGE_ISSUER}/token",
        "registration_endpoint": f"{EDGE_ISSUER}/register",
        "revocation_endpoint": f"{EDGE_ISSUER}/revoke",
    }

    # When a client registers and starts a sign-in through the edge
    client.headers.update(through_edge)
    client_id = register(client)["client_id"]
    _, challenge = pkce()
    login = authorize(client, client_id, challenge)
    # Then the sign-in starts (the upstream login, its callback on the domain), not a redirect to the issuer again
    assert login.status_code == 302, login.text
    callback = urllib.parse.parse_qs(urllib.parse.urlsplit(login.headers["location"]).query)["redirect_uri"][0]
    assert callback == f"{EDGE_ISSUER}/callback"

    # When a request goes around the edge, to the Function URL without the origin header or with a wrong one
    around = [
        client.get("/.well-known/oauth-authorization-server", headers={"x-origin-verify": value})
        for value in ("", "x" * 48)
    ]
    # Then each is refused before anything is served
    assert [answer.status_code for answer in around] == [403, 403]
    assert all("issuer" not in answer.text for answer in around)


def test_an_unreadable_issuer_is_503_temporarily_unavailable_then_read_once_it_is_there(environment, documents):
    # Given a server whose issuer parameter cannot be read at its first request
    client = build(environment, documents)[0]
    name = environment.stack.function("AuthorizationServer").environment["AUTHORIZATION_ISSUER_PARAMETER"]
    boto3.client("ssm").delete_parameter(Name=name)

    # When a client reads the metadata, before and after the parameter is back
    before = client.get("/.well-known/oauth-authorization-server")
    boto3.client("ssm").put_parameter(Name=name, Value=ISSUER, Type="String")
    after = client.get("/.well-known/oauth-authorization-server")

    # Then it is first told temporarily_unavailable (no issuer guessed, no 500), then the pinned issuer
    assert (before.status_code, before.json()["error"]) == (503, "temporarily_unavailable")
    assert after.json()["issuer"] == ISSUER


def test_by_default_https_redirects_may_go_only_to_the_hosted_clients(environment, documents):
    # Given the template's defaults, no allow-list at all, and an operator's wider list
    default = build(environment, documents)[0]
    empty = build(environment, documents, AUTHORIZATION_REDIRECT_HOSTS="")[0]
    widened = build(environment, documents, AUTHORIZATION_REDIRECT_HOSTS="claude.ai,mcp.example.org")[0]

    def registered(client: TestClient, uri: str) -> int:
        return int(client.post("/register", json={"redirect_uris": [uri]}).status_code)

    # Then the hosted clients' redirects are accepted by default, look-alike hosts are not
    for uri in (
        "https://claude.ai/api/mcp/auth_callback",
        "https://chatgpt.com/connector_platform_oauth_redirect",
        "https://vscode.dev/redirect",
    ):
        assert registered(default, uri) == 201, uri
    for uri in ("https://claude.ai.attacker.example/api/mcp/auth_callback", "https://attacker.example/cb"):
        assert registered(default, uri) == 400, uri
    # And an empty list allows no https redirect (loopback still), and an operator can widen the list
    assert registered(empty, "https://claude.ai/api/mcp/auth_callback") == 400
    assert registered(empty, "http://127.0.0.1:9/cb") == 201
    assert registered(widened, "https://mcp.example.org/cb") == 201


def test_the_consent_page_leads_with_the_redirect_host_and_shows_a_chosen_name_as_unverified(environment, documents):
    # Given a registration calling itself "Claude" whose answer goes to another (allowed) host, and an operator
    client = build(environment, documents, AUTHORIZATION_OPERATOR_NAME="Example Corp")[0]
    chatgpt = "https://chatgpt.com/connector_platform_oauth_redirect"
    client_id = register(client, client_name="Claude", redirect_uris=[chatgpt])["client_id"]

    # When the user reaches the consent page
    page, _ = consent_form(client, client_id, pkce()[1], redirect_uri=chatgpt)

    # Then the headline names where the access goes, not the name the registrant chose; that name is marked
    # as unverified, and the operator and the resource are named
    assert "chatgpt.com" in headline(page) and "Claude" not in headline(page)
    assert "<b>Claude</b> <span" in page.text and "not verified" in page.text
    assert "Example Corp" in page.text and RESOURCE in page.text
    assert 'content="width=device-width, initial-scale=1"' in page.text


def test_a_loopback_redirect_is_named_as_an_app_on_this_device(client):
    client_id = register(client, client_name="Claude")["client_id"]
    page, _ = consent_form(client, client_id, pkce()[1])
    assert "an app on this device" in headline(page) and "127.0.0.1" in headline(page)


def test_a_document_sending_codes_to_another_host_than_its_own_is_refused(environment, documents):
    # Given a server allowing both hosts, and a document at client.example whose redirect is on claude.ai
    client = build(environment, documents, AUTHORIZATION_REDIRECT_HOSTS="client.example,claude.ai")[0]
    claude = "https://claude.ai/api/mcp/auth_callback"
    documents.answers[CIMD_URL] = json.dumps({"client_id": CIMD_URL, "redirect_uris": [claude]}).encode()
    own = "https://client.example/oauth/other.json"
    documents.answers[own] = json.dumps(
        {"client_id": own, "redirect_uris": ["https://client.example/cb", REDIRECT]}
    ).encode()

    # When each is used to authorize
    refused = authorize(client, CIMD_URL, pkce()[1], redirect_uri=claude)
    accepted = authorize(client, own, pkce()[1])

    # Then the first is refused without a redirect; the one on its own host (and loopback) goes on to sign in
    assert (refused.status_code, refused.json()["error"]) == (400, "invalid_request")
    assert "client_id's host" in refused.json()["error_description"]
    assert accepted.status_code == 302 and accepted.headers["location"].startswith("https://idp.example/")


def test_a_sign_in_finished_in_another_browser_issues_nothing(environment, documents):
    # Given a sign-in started in one browser, and another browser (no cookies) and a third with its own cookie
    client, server = build(environment, documents)
    client_id = register(client)["client_id"]
    state = login_state(authorize(client, client_id, pkce()[1]))
    other = TestClient(server, base_url=ISSUER, follow_redirects=False)
    third = TestClient(server, base_url=ISSUER, follow_redirects=False)
    authorize(third, client_id, pkce()[1])

    # When the login link comes back in the other browsers, then in the one that started it
    answers = [b.get("/callback", params={"code": "upstream-code", "state": state}) for b in (other, third, client)]

    # Then the others get a 400 page (no redirect, no code, no consent form) and the sign-in is spent
    assert [a.status_code for a in answers] == [400, 400, 400]
    assert "another browser" in answers[0].text and "location" not in answers[0].headers
    assert all("<form" not in a.text for a in answers)


def test_the_login_cookie_is_httponly_lax_and_secure_on_https(client):
    answer = authorize(client, register(client)["client_id"], pkce()[1])
    cookie = answer.headers["set-cookie"]
    assert cookie.startswith("__Host-mcp_login=")
    assert all(part in cookie for part in ("HttpOnly", "Secure", "SameSite=lax", "Path=/"))


def test_on_loopback_http_the_login_cookie_is_not_secure_and_the_sign_in_finishes(environment, documents):
    # Given the local stack's server: its issuer a loopback http URL
    client = build(environment, documents, issuer="http://127.0.0.1:8790")[0]
    client_id = register(client)["client_id"]

    # When a user signs in
    login = authorize(client, client_id, pkce()[1])
    page = client.get("/callback", params={"code": "upstream-code", "state": login_state(login)})

    # Then the cookie is set without Secure (http), and the browser that started the sign-in finishes it
    assert login.headers["set-cookie"].startswith("mcp_login=") and "Secure" not in login.headers["set-cookie"]
    assert page.status_code == 200 and "<form" in page.text


def test_two_sign_ins_started_in_one_browser_both_reach_consent(client):
    client_id = register(client)["client_id"]
    states = [login_state(authorize(client, client_id, pkce()[1])) for _ in range(2)]
    pages = [client.get("/callback", params={"code": "upstream-code", "state": s}) for s in states]
    assert [p.status_code for p in pages] == [200, 200]


# Each hosted client's registration as its documentation or traffic shows it (docs/clients.md), the redirect it
# signs in with, and what the consent page's headline must name.
HOSTED_CLIENTS = {
    "Claude (claude.ai)": (
        ["https://claude.ai/api/mcp/auth_callback"],
        "https://claude.ai/api/mcp/auth_callback",
        "claude.ai",
    ),
    "Claude (claude.com)": (
        ["https://claude.com/api/mcp/auth_callback"],
        "https://claude.com/api/mcp/auth_callback",
        "claude.com",
    ),
    "ChatGPT": (
        ["https://chatgpt.com/connector_platform_oauth_redirect", "https://chatgpt.com/connector/oauth/abc123"],
        "https://chatgpt.com/connector/oauth/abc123",
        "chatgpt.com",
    ),
    "VS Code": (["http://127.0.0.1:33418", "https://vscode.dev/redirect"], "https://vscode.dev/redirect", "vscode.dev"),
    "Cursor": (
        [
            "cursor://anysphere.cursor-mcp/oauth/callback",
            "https://www.cursor.com/agents/mcp/oauth/callback",
            "http://localhost:8787/callback",
        ],
        "cursor://anysphere.cursor-mcp/oauth/callback",
        "cursor://anysphere.cursor-mcp",
    ),
}


@pytest.mark.parametrize("name", list(HOSTED_CLIENTS))
def test_each_hosted_clients_registration_reaches_consent_under_the_default_allow_list(client, name):
    # Given the template's default redirect allow-list, and a hosted client's registration shape
    uris, used, shown = HOSTED_CLIENTS[name]
    client_id = register(client, client_name=name, redirect_uris=uris)["client_id"]

    # When it sends a user to sign in with the redirect it uses
    page, _ = consent_form(client, client_id, pkce()[1], redirect_uri=used)

    # Then the consent page's headline names where the access goes
    assert shown in headline(page)


@pytest.mark.parametrize(
    "query",
    [{}, {"state": ""}, {"state": "x" * 65}, {"state": "no-such-transaction", "code": "c"}],
    ids=["no-state", "empty-state", "long-state", "unknown-state"],
)
def test_a_callback_that_names_no_live_sign_in_is_a_400_page_never_a_500(client, query):
    answer = client.get("/callback", params=query)
    assert answer.status_code == 400 and "<form" not in answer.text and "location" not in answer.headers


def test_a_malformed_login_cookie_is_replaced_and_the_sign_in_still_finishes(client):
    # Given a browser carrying a login cookie this server never set (wrong shape)
    client.cookies.set("__Host-mcp_login", "not-a-value-this-server-sets", domain="auth.example")
    client_id = register(client)["client_id"]

    # When it signs in
    login = authorize(client, client_id, pkce()[1])
    page = client.get("/callback", params={"code": "upstream-code", "state": login_state(login)})

    # Then /authorize set a value of its own, and the sign-in reaches consent
    assert "not-a-value" not in login.headers["set-cookie"]
    assert page.status_code == 200 and "<form" in page.text
