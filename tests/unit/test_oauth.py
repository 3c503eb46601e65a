"""OAuth resource-server mode at the HTTP edge: every way a token is refused, the scopes per tool, the RFC 9728
metadata, and an unreachable JWKS. Real RS256/ES256 tokens (PyJWT, cryptography) against a stub JWKS fetcher;
the inner app stands in for the SDK and echoes the principal the guard passed on."""

from __future__ import annotations

import base64
import hmac
import http.server
import json
import threading
import time
import urllib.error
from dataclasses import replace
from typing import Any

import anyio
import boto3
import botocore.exceptions
import httpx
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from pydantic import ValidationError

from devstack.wired_stack import LocalEnvironment
from mcp_backend.api_keys import ReservedUserId, new_api_key
from mcp_backend.config import McpSettings
from mcp_backend.doors import MCP_POST, METHODS, TOOL_DOORS, Door, DoorTable
from mcp_backend.jwks import JwksCache, fetch_url
from mcp_backend.mcp.auth import ApiKeyAuthenticator, current_caller
from mcp_backend.mcp.guard import MAX_JSON_DEPTH, HostPolicy, McpHttpGuard, json_nesting_exceeds
from mcp_backend.mcp.oauth import EitherAuthenticator, OAuthAuthenticator, TokenPolicy
from mcp_backend.mcp.request_body import buffered_body
from mcp_backend.netsafety import DeadlinePassed, is_loopback_host
from mcp_backend.stack_urls import StackUrl
from mcp_backend.tools.table import Access
from tests.loopback_http import trickling, trickling_tls_handshake

ISSUER = "https://issuer.example.com/"
HOST = "mcp.example.com"
RESOURCE = f"https://{HOST}/mcp"
METADATA_URL = f"https://{HOST}/.well-known/oauth-protected-resource/mcp"
TOOL_ACCESS = {"get_job": Access.READ, "submit_analysis": Access.SUBMIT}
RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
OTHER_RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
EC_KEY = ec.generate_private_key(ec.SECP256R1())


def jwk(private_key: Any, kid: str, alg: str | None = None) -> dict[str, Any]:
    algorithm = (
        jwt.algorithms.RSAAlgorithm if isinstance(private_key, rsa.RSAPrivateKey) else jwt.algorithms.ECAlgorithm
    )
    document = json.loads(algorithm.to_jwk(private_key.public_key()))
    return {**document, "kid": kid, "use": "sig", **({"alg": alg} if alg else {})}


class StubIssuer:
    """The authorization server's JWKS (and discovery) as the fetcher sees them; counts every fetch."""

    def __init__(self, *keys: dict[str, Any]) -> None:
        self.keys = list(keys)
        self.fetched: list[str] = []
        self.down = False
        self.discovery_issuer = ISSUER

    def __call__(self, url: str) -> bytes:
        self.fetched.append(url)
        if self.down:
            raise ConnectionRefusedError("issuer unreachable")
        if url.endswith("/.well-known/openid-configuration"):
            return json.dumps({"issuer": self.discovery_issuer, "jwks_uri": "https://issuer.example.com/jwks"}).encode()
        return json.dumps({"keys": self.keys}).encode()


def claims(**overrides: Any) -> dict[str, Any]:
    now = int(time.time())
    base = {"iss": ISSUER, "sub": "user-carol", "aud": RESOURCE, "exp": now + 300, "iat": now, "scope": "read submit"}
    return {key: value for key, value in {**base, **overrides}.items() if value is not None}


def token(private_key: Any = RSA_KEY, kid: str = "k1", alg: str = "RS256", **overrides: Any) -> str:
    return jwt.encode(claims(**overrides), private_key, algorithm=alg, headers={"kid": kid})


def policy(**overrides: Any) -> TokenPolicy:
    return TokenPolicy(**{"issuer": ISSUER, "algorithms": frozenset({"RS256", "ES256"}), **overrides})


async def echo(scope, receive, send) -> None:
    """The SDK's place: answers with who the guard said is calling and what body it received."""
    body, _ = await buffered_body(receive)
    principal = current_caller()
    payload = json.dumps({"userId": principal.user_id, "body": json.loads(body)}).encode()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": payload})


def guard(authenticator: Any, resource: str = RESOURCE) -> McpHttpGuard:
    return McpHttpGuard(
        echo,
        path="/mcp",
        hosts=HostPolicy(hosts=(HOST,)),
        authenticator=authenticator,
        resource=resource,
        tool_access=TOOL_ACCESS,
    )


class Clock:
    """The JWKS cache's monotonic clock, moved by the test."""

    def __init__(self) -> None:
        self.now = 1000.0  # a monotonic clock: no date, so nothing to compare with the wall clock

    def __call__(self) -> float:
        return self.now


def oauth(
    issuer: StubIssuer, jwks_url: str = "https://issuer.example.com/jwks", clock: Clock | None = None, **overrides: Any
) -> OAuthAuthenticator:
    cache = JwksCache(ISSUER, jwks_url, issuer, refresh_seconds=30, clock=clock or Clock())
    return OAuthAuthenticator(policy(**overrides), cache)


def call(app: McpHttpGuard, bearer: str | None, tool: str = "get_job", url: str = "/mcp", method: str = "POST"):
    async def send() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=f"https://{HOST}") as client:
            headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
            if bearer is not None:
                headers["authorization"] = f"Bearer {bearer}"
            body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": {}}}
            return await client.request(method, url, json=body if method == "POST" else None, headers=headers)

    return anyio.run(send)


def assert_unauthorized(response: httpx.Response, token_presented: bool = True) -> None:
    assert response.status_code == 401
    expected_error = 'error="invalid_token", ' if token_presented else ""
    assert response.headers["www-authenticate"] == f'Bearer {expected_error}resource_metadata="{METADATA_URL}"'
    assert response.json()["error"]["code"] == -32001


def test_a_valid_token_for_this_resource_is_the_caller_named_by_sub():
    # Given an issuer with one RSA key and an endpoint that accepts its tokens
    app = guard(oauth(StubIssuer(jwk(RSA_KEY, "k1"))))

    # When a token issued for this resource calls a read tool
    response = call(app, token())

    # Then the request reaches the app as that subject, body intact
    assert response.status_code == 200
    assert response.json()["userId"] == f"oauth:{ISSUER}:user-carol"
    assert response.json()["body"]["params"]["name"] == "get_job"


def test_es256_tokens_and_a_configured_user_claim_work():
    # Given an EC key and a user id taken from a custom claim
    app = guard(oauth(StubIssuer(jwk(EC_KEY, "e1", alg="ES256")), user_claim="email"))

    # When an ES256 token carrying that claim arrives
    response = call(app, token(EC_KEY, kid="e1", alg="ES256", email="carol@example.com"))

    # Then the user id is the claim's value
    assert response.status_code == 200 and response.json()["userId"] == f"oauth:{ISSUER}:carol@example.com"


@pytest.mark.parametrize(
    ("case", "overrides"),
    [
        # (claims made when the test runs, not when the suite is collected: a long suite would age them)
        ("expired", lambda: {"exp": int(time.time()) - 120}),
        ("not yet valid", lambda: {"nbf": int(time.time()) + 120}),
        ("wrong issuer", lambda: {"iss": "https://evil.example.com/"}),
        ("wrong audience", lambda: {"aud": "https://other.example.com/mcp"}),
        ("no expiry", lambda: {"exp": None}),
        ("an id token", lambda: {"token_use": "id"}),
        ("no subject", lambda: {"sub": None}),
    ],
)
def test_a_token_with_bad_claims_is_a_401_with_the_metadata_challenge(case, overrides):
    # Given an endpoint and its issuer
    app = guard(oauth(StubIssuer(jwk(RSA_KEY, "k1"))))

    # When a correctly signed token with a bad claim arrives
    response = call(app, token(**overrides()))

    # Then it is refused with the RFC 9728 challenge, whatever the case
    assert_unauthorized(response)


def test_the_leeway_accepts_a_token_that_expired_a_few_seconds_ago():
    # Given an endpoint with the default 30 s leeway
    app = guard(oauth(StubIssuer(jwk(RSA_KEY, "k1"))))

    # When a token that expired 5 seconds ago arrives
    response = call(app, token(exp=int(time.time()) - 5))

    # Then clock skew is forgiven
    assert response.status_code == 200


def test_an_unknown_kid_refreshes_the_jwks_once_then_is_a_401():
    # Given an endpoint that has fetched the issuer's keys once
    issuer, clock = StubIssuer(jwk(RSA_KEY, "k1")), Clock()
    app = guard(oauth(issuer, clock=clock))
    assert call(app, token()).status_code == 200
    assert len(issuer.fetched) == 1

    # When, past the refresh interval, tokens with kids the JWKS does not hold arrive one after another
    clock.now += 31
    first = call(app, token(OTHER_RSA_KEY, kid="k-unknown"))
    second = call(app, token(OTHER_RSA_KEY, kid="k-another"))

    # Then the first triggered one refresh, the second none (bounded), and both are 401
    assert_unauthorized(first)
    assert_unauthorized(second)
    assert len(issuer.fetched) == 2


def test_a_rotated_key_is_found_by_the_refresh_an_unknown_kid_triggers():
    # Given an endpoint that cached the JWKS before the issuer added a key
    issuer, clock = StubIssuer(jwk(RSA_KEY, "k1")), Clock()
    app = guard(oauth(issuer, clock=clock))
    assert call(app, token()).status_code == 200
    issuer.keys.append(jwk(OTHER_RSA_KEY, "k2"))
    clock.now += 31

    # When a token signed with the new key arrives
    response = call(app, token(OTHER_RSA_KEY, kid="k2"))

    # Then the refresh found it
    assert response.status_code == 200


def test_a_tampered_payload_fails_the_signature():
    # Given a valid token whose payload is swapped for another subject's
    header, _, signature = token().split(".")
    forged = base64.urlsafe_b64encode(json.dumps(claims(sub="user-admin")).encode()).rstrip(b"=").decode()

    # When it is presented
    response = call(guard(oauth(StubIssuer(jwk(RSA_KEY, "k1")))), f"{header}.{forged}.{signature}")

    # Then the signature does not verify
    assert_unauthorized(response)


def test_a_token_signed_by_another_key_under_a_known_kid_is_refused():
    # When a token claims the issuer's kid but is signed with an attacker's key
    response = call(guard(oauth(StubIssuer(jwk(RSA_KEY, "k1")))), token(OTHER_RSA_KEY, kid="k1"))

    # Then it is refused
    assert_unauthorized(response)


def test_alg_none_is_refused_without_fetching_keys():
    # Given an unsigned token (alg none)
    issuer = StubIssuer(jwk(RSA_KEY, "k1"))
    unsigned = jwt.encode(claims(), None, algorithm="none", headers={"kid": "k1"})

    # When it is presented
    response = call(guard(oauth(issuer)), unsigned)

    # Then it is refused before any key is looked up
    assert_unauthorized(response)
    assert issuer.fetched == []


def test_hs256_signed_with_the_public_key_is_refused():
    # Given the classic confusion attack: HMAC keyed with the issuer's public key (PEM)
    public_pem = RSA_KEY.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    header = base64.urlsafe_b64encode(b'{"alg":"HS256","typ":"JWT","kid":"k1"}').rstrip(b"=")
    payload = base64.urlsafe_b64encode(json.dumps(claims()).encode()).rstrip(b"=")
    # Signed by hand: PyJWT itself refuses a PEM as an HMAC key.
    signature = hmac.new(public_pem, header + b"." + payload, "sha256").digest()
    forged = (header + b"." + payload + b"." + base64.urlsafe_b64encode(signature).rstrip(b"=")).decode()

    # When it is presented
    response = call(guard(oauth(StubIssuer(jwk(RSA_KEY, "k1")))), forged)

    # Then it is refused
    assert_unauthorized(response)


def test_an_es256_token_under_an_rsa_kid_is_refused():
    # When the header's algorithm does not fit the key the kid names
    response = call(guard(oauth(StubIssuer(jwk(RSA_KEY, "k1")))), token(EC_KEY, kid="k1", alg="ES256"))

    # Then it is refused
    assert_unauthorized(response)


def test_a_missing_scope_is_a_403_insufficient_scope_naming_it():
    # Given a token that may read but not submit
    app = guard(oauth(StubIssuer(jwk(RSA_KEY, "k1"))))
    read_only = token(scope="read")

    # When it calls a read tool, then a submit tool
    reading = call(app, read_only, tool="get_job")
    submitting = call(app, read_only, tool="submit_analysis")

    # Then reading works and submitting is forbidden with the scope it needs
    assert reading.status_code == 200
    assert submitting.status_code == 403
    assert submitting.headers["www-authenticate"] == (
        f'Bearer error="insufficient_scope", scope="submit", resource_metadata="{METADATA_URL}"'
    )


def test_a_token_in_the_query_string_is_ignored():
    # When a valid token comes as ?access_token= instead of the Authorization header
    response = call(guard(oauth(StubIssuer(jwk(RSA_KEY, "k1")))), None, url=f"/mcp?access_token={token()}")

    # Then the request has no credentials: 401 without an error code (RFC 6750 section 3)
    assert_unauthorized(response, token_presented=False)


def test_an_unreachable_jwks_is_a_503_with_retry_after_logged_once(caplog):
    # Given an issuer whose JWKS cannot be fetched
    issuer = StubIssuer(jwk(RSA_KEY, "k1"))
    issuer.down = True
    app = guard(oauth(issuer))
    presented = token()

    # When three requests arrive within the refresh interval
    responses = [call(app, presented) for _ in range(3)]

    # Then each is told to retry (never 401 or 500), one fetch was tried and one line logged, without the token
    assert [r.status_code for r in responses] == [503, 503, 503]
    assert all(1 <= int(r.headers["retry-after"]) <= 30 for r in responses)
    assert len(issuer.fetched) == 1
    messages = [record.getMessage() for record in caplog.records]
    assert messages.count("OAuth issuer keys unavailable") == 1
    logged = caplog.text + " ".join(str(record.__dict__) for record in caplog.records)
    assert presented.split(".")[1] not in logged and presented.split(".")[2] not in logged


def test_a_misconfigured_issuer_is_a_503_not_a_401():
    # Given no JWKS URL, and a discovery document that names another issuer
    issuer = StubIssuer(jwk(RSA_KEY, "k1"))
    issuer.discovery_issuer = "https://someone-else.example.com/"

    # When a token arrives
    response = call(guard(oauth(issuer, jwks_url="")), token())

    # Then the endpoint says it cannot check tokens right now
    assert response.status_code == 503 and "retry-after" in response.headers


def test_discovery_finds_the_jwks_of_the_issuer():
    # Given no JWKS URL: the issuer's openid-configuration names it
    issuer = StubIssuer(jwk(RSA_KEY, "k1"))

    # When a token arrives
    response = call(guard(oauth(issuer, jwks_url="")), token())

    # Then discovery then the JWKS were fetched and the token accepted
    assert response.status_code == 200
    assert issuer.fetched == [
        ISSUER.rstrip("/") + "/.well-known/openid-configuration",
        "https://issuer.example.com/jwks",
    ]


COGNITO = {"client_ids": ("client-a",), "scope_prefix": "mcp-backend/"}


@pytest.mark.parametrize(
    ("overrides", "status"),
    [
        ({"client_id": "client-a", "scope": "mcp-backend/read"}, 200),
        ({"client_id": "client-b", "scope": "mcp-backend/read"}, 401),  # not in the allow-list
        ({"client_id": "client-a", "scope": "other-api/read"}, 401),  # no scope of this resource server
        ({"client_id": "client-a", "scope": "mcp-backend/read", "token_use": "id"}, 401),
    ],
)
def test_tokens_without_aud_need_an_allowed_client_and_this_resource_servers_scope(overrides, status):
    # Given a Cognito-style policy: client allow-list and scope prefix
    app = guard(oauth(StubIssuer(jwk(RSA_KEY, "k1")), **COGNITO))

    # When a Cognito client-credentials access token (no aud; sub is the client) arrives
    response = call(app, token(aud=None, sub=overrides["client_id"], **{"token_use": "access", **overrides}))

    # Then only an allowed client with this resource server's scope gets through
    assert response.status_code == status


def test_an_extra_audience_is_accepted():
    app = guard(oauth(StubIssuer(jwk(RSA_KEY, "k1")), audiences=("api://mcp-backend",)))
    assert call(app, token(aud=["api://mcp-backend", "other"])).status_code == 200


def test_the_configured_resource_is_the_audience_instead_of_the_host():
    # Given an endpoint whose resource URL is configured (a custom domain in front of the Function URL)
    app = guard(oauth(StubIssuer(jwk(RSA_KEY, "k1"))), resource="https://api.example.org/mcp")

    # Then tokens for that URL pass and tokens for the Host-derived URL do not
    assert call(app, token(aud="https://api.example.org/mcp")).status_code == 200
    assert call(app, token()).status_code == 401


@pytest.mark.parametrize("path", ["/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp"])
def test_protected_resource_metadata_names_the_issuer_and_scopes(path):
    # When a client fetches the metadata, without credentials
    response = call(guard(oauth(StubIssuer(), scope_prefix="mcp:")), None, url=path, method="GET")

    # Then it is RFC 9728's document for this resource
    assert response.status_code == 200
    assert response.json() == {
        "resource": RESOURCE,
        "authorization_servers": [ISSUER],
        "scopes_supported": ["mcp:read", "mcp:submit"],
        "bearer_methods_supported": ["header"],
        "resource_name": "MCP endpoint",
    }


def test_api_key_mode_has_no_metadata_and_keeps_its_challenge():
    # Given the API-key authenticator
    key, table = new_api_key("user-alice")

    class Secret:
        def read(self, fresh: bool = False) -> str:
            return table

    app = guard(ApiKeyAuthenticator(Secret()))

    # Then there is no metadata, the challenge is as it always was, and keys work
    assert call(app, None, url="/.well-known/oauth-protected-resource", method="GET").status_code == 404
    assert call(app, "mcpk_wrong").headers["www-authenticate"] == 'Bearer realm="mcp", error="invalid_token"'
    assert call(app, key, tool="submit_analysis").json()["userId"] == "apikey:user-alice"


def test_both_mode_accepts_an_api_key_or_a_token():
    key, table = new_api_key("user-alice")

    class Secret:
        def read(self, fresh: bool = False) -> str:
            return table

    app = guard(EitherAuthenticator(ApiKeyAuthenticator(Secret()), oauth(StubIssuer(jwk(RSA_KEY, "k1")))))
    assert call(app, key, tool="submit_analysis").json()["userId"] == "apikey:user-alice"
    assert call(app, token()).json()["userId"] == f"oauth:{ISSUER}:user-carol"
    assert_unauthorized(call(app, "not-a-token"))


def required_access(body: bytes, tool_access: dict[str, Access]) -> frozenset[Access]:
    """The scopes the guard's door table asks of a body (the test's tools' scopes over the table's)."""
    tools = {**TOOL_DOORS, **{name: replace(MCP_POST, access=access) for name, access in tool_access.items()}}
    door = DoorTable(METHODS, tools).decide(body)
    assert isinstance(door, Door)
    return door.access


def test_required_access_reads_each_tools_call():
    body = json.dumps([{"method": "tools/call", "params": {"name": "get_job"}}, {"method": "tools/list"}]).encode()
    assert required_access(body, TOOL_ACCESS) == {Access.READ}
    assert required_access(b'{"method":"tools/call","params":{"name":"nope"}}', TOOL_ACCESS) == {Access.SUBMIT}
    assert required_access(b"not json", TOOL_ACCESS) == {Access.SUBMIT}  # unreadable: the strictest


def test_cancelling_a_task_needs_the_submit_scope_and_polling_it_the_read_one():
    # A read-only token may poll its tasks but not stop the work they queued.
    assert required_access(b'{"method":"tasks/cancel","params":{"taskId":"t"}}', TOOL_ACCESS) == {Access.SUBMIT}
    assert required_access(b'{"method":"tasks/get","params":{"taskId":"t"}}', TOOL_ACCESS) == set()


@pytest.mark.parametrize("method", ["resources/list", "resources/read", "prompts/get", "completion/complete"])
def test_reading_resources_and_prompts_needs_the_read_scope_and_their_catalogs_none(method):
    # Given a request that reads the caller's jobs (as a resource, a prompt or a completion of their ids)
    body = json.dumps({"method": method, "params": {"uri": "job://j", "name": "p"}}).encode()
    # Then it needs the read scope, as get_job does; the listings of templates and prompts need none
    assert required_access(body, TOOL_ACCESS) == {Access.READ}
    for catalog in ("resources/templates/list", "prompts/list"):
        assert required_access(json.dumps({"method": catalog}).encode(), TOOL_ACCESS) == set()


@pytest.mark.parametrize("algorithms", ["HS256", "none", "RS256,HS512", ""])
def test_symmetric_or_no_algorithms_are_a_configuration_error(algorithms):
    environment = {"JOB_TABLE_NAME": "t", "JOB_QUEUE_URL": "q", "JOB_DEAD_LETTER_QUEUE_URL": "d"}
    environment |= {"CALL_LOG_STREAM_NAME": "s", "API_KEYS_SECRET_ID": "k", "AUTH_MODE": "oauth"}
    environment |= {"RATE_LIMIT_TABLE_NAME": "r"}
    with pytest.raises(ValidationError):
        McpSettings.model_validate({**environment, "OAUTH_ISSUER": ISSUER, "OAUTH_ALGORITHMS": algorithms})
    with pytest.raises(ValidationError):
        McpSettings.model_validate(environment)  # oauth without an issuer


@pytest.mark.parametrize("url", ["http://issuer.example/jwks", "http://10.0.0.1/jwks", "ftp://localhost/jwks"])
def test_the_issuers_urls_are_https_unless_on_loopback(url):
    """Given an issuer URL in plain http off loopback (or another scheme), when its keys are fetched, then the
    fetch is refused before any connection is made."""
    with pytest.raises(ValueError, match="must be https"):
        fetch_url(url)


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("localhost", True),
        ("127.0.0.1", True),
        ("127.8.9.10", True),
        ("::1", True),
        ("::ffff:127.0.0.1", True),
        ("10.0.0.1", False),
        ("::ffff:10.0.0.1", False),
        ("issuer.example", False),
        ("", False),
    ],
)
def test_loopback_hosts_are_localhost_and_loopback_literals(host, loopback):
    """Given a URL's host, then it is loopback when it names localhost or a loopback address (IPv4-mapped too)."""
    assert is_loopback_host(host) is loopback


def call_as_host(app: McpHttpGuard, bearer: str, host: str) -> httpx.Response:
    async def send() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=f"https://{host}") as client:
            headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
            body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "get_job", "arguments": {}}}
            return await client.post("/mcp", json=body, headers={**headers, "authorization": f"Bearer {bearer}"})

    return anyio.run(send)


@pytest.mark.parametrize("resource", ["", "https://abc123.lambda-url.us-east-1.on.aws/mcp"])
def test_a_token_for_another_function_url_sent_with_that_url_as_host_is_a_401(resource):
    # Given an endpoint on a Function URL (every Function URL host of the region passes the Host check), with or
    # without its resource configured, accepting one extra audience
    authenticator = oauth(StubIssuer(jwk(RSA_KEY, "k1")), audiences=("api://mcp-backend",))
    app = McpHttpGuard(
        echo,
        path="/mcp",
        hosts=HostPolicy.for_region("us-east-1"),
        authenticator=authenticator,
        resource=resource,
        tool_access=TOOL_ACCESS,
    )
    other = "evil999.lambda-url.us-east-1.on.aws"

    # When a token minted for another Function URL is sent with that URL as Host
    response = call_as_host(app, token(aud=f"https://{other}/mcp"), other)

    # Then it is refused: the audience never comes from the request
    assert response.status_code == 401
    assert 'error="invalid_token"' in response.headers["www-authenticate"]
    # And a token for an audience this endpoint is configured with still passes, whatever the Host
    assert call_as_host(app, token(aud="api://mcp-backend"), other).status_code == 200


@pytest.mark.parametrize("alg", [["RS256"], {"RS256": 1}, 256, None])
def test_a_jwt_header_whose_alg_is_not_a_string_is_a_401_invalid_token(alg):
    # Given an endpoint accepting tokens of one issuer
    app = guard(oauth(StubIssuer(jwk(RSA_KEY, "k1"))))
    header = base64.urlsafe_b64encode(json.dumps({"alg": alg, "kid": "k1", "typ": "JWT"}).encode()).rstrip(b"=")
    payload = base64.urlsafe_b64encode(json.dumps(claims()).encode()).rstrip(b"=")

    # When a token whose header's alg is a list, an object, a number or null is presented
    response = call(app, f"{header.decode()}.{payload.decode()}.c2ln")

    # Then it is an ordinary invalid token (401), not an unavailable service
    assert_unauthorized(response)


def post_raw(app: McpHttpGuard, bearer: str, body: bytes) -> httpx.Response:
    async def send() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=f"https://{HOST}") as client:
            headers = {
                "accept": "application/json, text/event-stream",
                "content-type": "application/json",
                "authorization": f"Bearer {bearer}",
            }
            return await client.post("/mcp", content=body, headers=headers)

    return anyio.run(send)


@pytest.mark.parametrize("opening", [b"[", b'{"a":'])
def test_a_body_nested_deeper_than_the_limit_is_a_400_before_any_parser_recurses(opening):
    # Given a valid token (its scopes are read from the body) and a 5,000-deep JSON body
    app = guard(oauth(StubIssuer(jwk(RSA_KEY, "k1"))))
    body = opening * 5000 + b"1" + (b"]" if opening == b"[" else b"}") * 5000

    # When it is posted
    response = post_raw(app, token(), body)

    # Then it is a 400 JSON-RPC parse error naming the limit, not a 500
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == -32700 and str(MAX_JSON_DEPTH) in error["message"]


@pytest.mark.parametrize(
    ("body", "exceeds"),
    [
        (b"[" * MAX_JSON_DEPTH + b"]" * MAX_JSON_DEPTH, False),
        (b"[" * (MAX_JSON_DEPTH + 1) + b"]" * (MAX_JSON_DEPTH + 1), True),
        (b'{"a":' * (MAX_JSON_DEPTH + 1) + b"1" + b"}" * (MAX_JSON_DEPTH + 1), True),
        (b'["' + b"[{" * MAX_JSON_DEPTH + b'"]', False),  # more brackets than the limit, all but one in a string
        (b"{}" * (MAX_JSON_DEPTH * 2), False),  # many objects, none inside another
    ],
)
def test_the_nesting_limit_counts_open_arrays_and_objects_exactly(body, exceeds):
    # Given a body nested to a known depth
    # When the guard measures it
    # Then it is refused only past the limit
    assert json_nesting_exceeds(body, MAX_JSON_DEPTH) is exceeds


def test_brackets_inside_strings_do_not_count_towards_the_nesting_limit():
    app = guard(oauth(StubIssuer(jwk(RSA_KEY, "k1"))))
    call_body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "get_job", "arguments": {}}}
    call_body["params"]["arguments"] = {"note": "[[[{{{" * 1000 + '\\"' + "]]]"}
    assert post_raw(app, token(), json.dumps(call_body).encode()).status_code == 200


@pytest.mark.parametrize(
    "body",
    [
        b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"submit_analysis"',  # truncated
        b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_job"}}\xff',  # not UTF-8 after it
    ],
)
def test_a_body_the_parsers_cannot_read_needs_the_strictest_scope(body):
    # Given a token that may only read
    app = guard(oauth(StubIssuer(jwk(RSA_KEY, "k1"))))

    # When it posts a body a JSON parser cannot read
    response = post_raw(app, token(scope="read"), body)

    # Then the guard fails closed: the body needs the submit scope, so it is a 403 before the SDK sees it
    assert response.status_code == 403
    assert 'error="insufficient_scope", scope="submit"' in response.headers["www-authenticate"]


@pytest.fixture
def redirecting_issuer():
    """A loopback JWKS host that answers every GET with a 302 to another loopback URL serving keys."""
    keys = json.dumps({"keys": [jwk(RSA_KEY, "k1")]}).encode()
    served: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            served.append(self.path)
            if self.path == "/jwks":
                self.send_response(302)
                self.send_header("location", "/elsewhere")
                self.send_header("content-length", "0")
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(keys)))
            self.end_headers()
            self.wfile.write(keys)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", served
    server.shutdown()
    server.server_close()


def test_a_jwks_fetch_follows_no_redirect(redirecting_issuer):
    # Given a JWKS URL that redirects to a document holding the keys
    base, served = redirecting_issuer

    # When the keys are fetched
    # Then the redirect is refused, not followed: the target was never requested
    with pytest.raises(urllib.error.HTTPError, match="302"):
        fetch_url(f"{base}/jwks")
    assert served == ["/jwks"]


def test_the_jwks_lock_is_not_held_while_the_keys_are_fetched():
    # Given a JWKS cache whose fetch checks, while it runs, whether another request could take the lock
    lock_free_during_fetch: list[bool] = []
    issuer = StubIssuer(jwk(RSA_KEY, "k1"))
    cache = JwksCache(ISSUER, "https://issuer.example.com/jwks", issuer, refresh_seconds=30, clock=Clock())

    def fetch(url: str) -> bytes:
        acquired = cache._lock.acquire(blocking=False)
        if acquired:
            cache._lock.release()
        lock_free_during_fetch.append(acquired)
        return issuer(url)

    cache.fetch = fetch

    # When a key is looked up (a first fetch)
    key = cache.key_for("k1")

    # Then the key was found, and the lock was free during the network I/O
    assert key is not None and lock_free_during_fetch == [True]


def test_requests_arriving_during_one_slow_jwks_fetch_wait_for_it_and_are_all_answered():
    # Given a cold JWKS cache whose first fetch blocks until every request has arrived
    requests = 8
    issuer = StubIssuer(jwk(RSA_KEY, "k1"))
    arrived, release = threading.Barrier(requests + 1), threading.Event()

    def slow_fetch(url: str) -> bytes:
        release.wait(10)
        return issuer(url)

    cache = JwksCache(ISSUER, "https://issuer.example.com/jwks", slow_fetch, refresh_seconds=30, clock=Clock())
    found: list[Any] = []

    def look_up() -> None:
        arrived.wait(10)
        try:
            found.append(cache.key_for("k1"))
        except Exception as error:  # what a request was told, compared below
            found.append(error)

    threads = [threading.Thread(target=look_up) for _ in range(requests)]
    for thread in threads:
        thread.start()

    # When they all arrive while the one fetch is under way (the fetch is released once the others have had
    # their answer, or have had a moment to start waiting), and then it completes
    arrived.wait(10)
    settle = time.monotonic() + 1.0
    while len(found) < requests - 1 and time.monotonic() < settle:
        time.sleep(0.01)
    release.set()
    for thread in threads:
        thread.join(15)

    # Then the issuer was asked once and every request got the key (none was told 503)
    assert len(issuer.fetched) == 1
    assert len(found) == requests and all(getattr(key, "jwk", None) is not None for key in found), found


class StaticSecret:
    def __init__(self, table: str) -> None:
        self.table = table

    def read(self, fresh: bool = False) -> str:
        return self.table


def test_an_api_key_user_and_a_token_subject_of_the_same_name_are_different_principals():
    # Given AuthMode both: an API key issued for "user-carol" and a token whose sub is "user-carol"
    key, table = new_api_key("user-carol")
    api_keys = ApiKeyAuthenticator(StaticSecret(table))
    app = guard(EitherAuthenticator(api_keys, oauth(StubIssuer(jwk(RSA_KEY, "k1")))))

    # When each calls
    by_key = call(app, key).json()["userId"]
    by_token = call(app, token(sub="user-carol")).json()["userId"]

    # Then each is named by how it authenticated, so neither can reach the other's jobs, datasets or endpoints
    assert by_key == "apikey:user-carol"
    assert by_token == f"oauth:{ISSUER}:user-carol"


@pytest.mark.parametrize("reserved", ["stack", "self-probe"])
def test_a_reserved_user_id_is_refused_for_a_new_key(reserved):
    with pytest.raises(ReservedUserId, match=reserved):
        new_api_key(reserved)


@pytest.mark.parametrize(
    ("tier_claim", "presented", "tier"),
    [("tier", "pro", "pro"), ("tier", "admin", "free"), ("", "internal", "free"), ("tier", None, "free")],
)
def test_the_tier_comes_from_the_token_only_where_the_issuer_is_trusted_for_it(tier_claim, presented, tier):
    # Given an endpoint that reads the tier from a claim (the stack's own authorization server), or from none
    authenticator = oauth(StubIssuer(jwk(RSA_KEY, "k1")), tier_claim=tier_claim)

    # When a token carrying a tier (a real one, a made-up one, or none) is checked
    principal = authenticator.verify(token(tier=presented), RESOURCE)

    # Then the caller has that tier only when the claim is configured and names a tier; free otherwise
    assert principal.tier == tier


class ParameterStore:
    """SSM's GetParameter for the one parameter the template writes (None: unreadable, as without permission)."""

    def __init__(self, value: str | None) -> None:
        self.value = value
        self.reads = 0

    def get_parameter(self, Name: str) -> dict[str, Any]:
        self.reads += 1
        if self.value is None:
            raise botocore.exceptions.ClientError({"Error": {"Code": "AccessDeniedException"}}, "GetParameter")
        return {"Parameter": {"Name": Name, "Value": self.value}}


def pinned_guard(parameters: ParameterStore) -> McpHttpGuard:
    return McpHttpGuard(
        echo,
        path="/mcp",
        hosts=HostPolicy.for_region("us-east-1"),
        authenticator=oauth(StubIssuer(jwk(RSA_KEY, "k1"))),
        tool_access=TOOL_ACCESS,
        pinned_resource=StackUrl("/stack/authorization/resource", parameters),
    )


def test_with_the_stacks_own_authorization_server_the_audience_is_the_pinned_url_never_the_host():
    # Given an endpoint whose URL the template wrote to its parameter, reached through another Function URL host
    mine, theirs = "https://abc123.lambda-url.us-east-1.on.aws/mcp", "evil999.lambda-url.us-east-1.on.aws"
    parameters = ParameterStore(mine)
    app = pinned_guard(parameters)

    # When a token for the pinned URL and one for the Host's URL are sent with that Host
    pinned = call_as_host(app, token(aud=mine), theirs)
    host_made = call_as_host(app, token(aud=f"https://{theirs}/mcp"), theirs)

    # Then only the token for the pinned URL passes, and the parameter was read once
    assert pinned.status_code == 200
    assert host_made.status_code == 401
    assert parameters.reads == 1


def test_the_metadata_and_the_challenge_name_the_pinned_url_whatever_the_host():
    # Given an endpoint whose URL the template wrote to its parameter, reached through another Function URL host
    mine, theirs = "https://abc123.lambda-url.us-east-1.on.aws/mcp", "evil999.lambda-url.us-east-1.on.aws"
    app = pinned_guard(ParameterStore(mine))

    async def fetch() -> tuple[httpx.Response, httpx.Response]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=f"https://{theirs}") as client:
            metadata = await client.get("/.well-known/oauth-protected-resource/mcp")
            body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
            headers = {"accept": "application/json, text/event-stream"}
            return metadata, await client.post("/mcp", json=body, headers=headers)

    # When a client reads the RFC 9728 metadata and calls without a token
    metadata, unauthorized = anyio.run(fetch)

    # Then both name the pinned URL, never one made of the Host
    assert metadata.json()["resource"] == mine
    assert unauthorized.status_code == 401 and theirs not in unauthorized.headers["www-authenticate"]


def test_an_unreadable_endpoint_parameter_is_503_and_read_again_later():
    # Given an endpoint whose parameter cannot be read at first
    mine = "https://abc123.lambda-url.us-east-1.on.aws/mcp"
    parameters = ParameterStore(None)
    app = pinned_guard(parameters)

    # When a token arrives before and after the parameter becomes readable
    before = call_as_host(app, token(aud=mine), "abc123.lambda-url.us-east-1.on.aws")
    parameters.value = mine
    after = call_as_host(app, token(aud=mine), "abc123.lambda-url.us-east-1.on.aws")

    # Then the first is 503 with Retry-After (no audience guessed from the Host), the second passes
    assert before.status_code == 503 and "retry-after" in before.headers
    assert after.status_code == 200


def test_a_jwks_fetch_ends_at_its_deadline_however_slowly_the_issuer_trickles():
    # Given an issuer that sends its answer one byte at a time, each byte well within any read timeout
    answer = b'HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 11\r\n\r\n{"keys": []}'
    with trickling(answer) as (base, closed_early):
        # When its keys are fetched with a 0.5 s deadline
        # Then the fetch fails naming the deadline, and the issuer saw the connection closed before it was done
        with pytest.raises(DeadlinePassed, match=r"0\.5 s deadline"):
            fetch_url(f"{base}/jwks", timeout=0.5)
        assert closed_early.wait(10)


def test_a_jwks_fetch_ends_at_its_deadline_in_a_trickled_tls_handshake():
    # Given an issuer whose TLS handshake arrives one byte at a time
    with trickling_tls_handshake() as (port, closed_early):
        # When its keys are fetched over https with a 0.5 s deadline
        # Then the fetch fails naming the deadline, and the issuer saw the connection closed mid-handshake
        with pytest.raises(DeadlinePassed, match=r"0\.5 s deadline"):
            fetch_url(f"https://127.0.0.1:{port}/jwks", timeout=0.5)
        assert closed_early.wait(10)


@pytest.mark.parametrize(
    ("presented", "tier"),
    [("gold", "pro"), (["bronze", "staff"], "internal"), ("silver", "free"), (None, "free"), (7, "free")],
    ids=["mapped", "the highest of several", "unmapped", "absent", "not a string"],
)
def test_an_external_issuers_claim_maps_to_a_tier_the_lowest_when_absent_or_unmapped(aws, presented, tier):
    # Given a stack on an external issuer, told which claim carries the plan and how plans map to tiers
    parameters = {
        "AuthMode": "oauth",
        "OAuthIssuer": ISSUER,
        "OAuthJwksUrl": "https://issuer.example.com/jwks",
        "OAuthTierClaim": "plan",
        "OAuthTierMap": "gold=pro,staff=internal",
    }
    variables = LocalEnvironment(boto3.client, parameters=parameters, on_demand=True).stack.function("McpServer")
    settings = McpSettings.model_validate({**variables.environment, "OAUTH_RESOURCE": RESOURCE})
    authenticator = OAuthAuthenticator(
        TokenPolicy.from_settings(settings), JwksCache(ISSUER, settings.oauth_jwks_url, StubIssuer(jwk(RSA_KEY, "k1")))
    )

    # When a token whose plan claim is mapped, several values, unmapped, absent or not a string is checked
    principal = authenticator.verify(token(plan=presented), RESOURCE)

    # Then the caller's tier is the highest mapped one, and the lowest tier otherwise
    assert principal.tier == tier


def test_a_tier_map_naming_no_tier_is_a_configuration_error():
    environment = {"JOB_TABLE_NAME": "t", "JOB_QUEUE_URL": "q", "JOB_DEAD_LETTER_QUEUE_URL": "d"}
    environment |= {"CALL_LOG_STREAM_NAME": "s", "API_KEYS_SECRET_ID": "k", "RATE_LIMIT_TABLE_NAME": "r"}
    with pytest.raises(ValidationError, match="OAUTH_TIER_MAP"):
        McpSettings.model_validate({**environment, "OAUTH_TIER_CLAIM": "plan", "OAUTH_TIER_MAP": "gold=platinum"})
