"""The stack's own authorization server end to end on the local stack (`make dev AUTH=builtin`): the official MCP
Python SDK client's OAuth provider, knowing only the endpoint URL, discovers the server, registers itself (RFC 7591),
sends the user through the local Cognito login and the consent page, gets tokens and calls submit_analysis; then
refresh rotation, reuse detection and revocation against the same stack."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import html
import json
import re
import secrets
import urllib.parse
from typing import Any

import httpx
import jwt
import pytest

from devstack.__main__ import banner
from devstack.stack.cognito_login import seed_login_user
from tests.e2e.browser import LoopbackServer

pytestmark = pytest.mark.e2e

REDIRECT = "http://127.0.0.1:47999/callback"  # the client's loopback listener: the user agent stops at it


@pytest.fixture
def builtin_stack(start_stack):
    """The product stack with the built-in authorization server, its endpoint and server URLs, the test user."""
    stack = start_stack(parameters={"AuthMode": "oauth", "AuthorizationServerMode": "builtin"})
    webs = {web.spec.logical_id: web for web in stack.web_functions.values()}
    user = seed_login_user(stack.client("cognito-idp"))
    assert user is not None
    return stack, webs["McpServer"].url, webs["AuthorizationServer"].url, user


class UserAgent:
    """The user's browser, played with httpx: follows the sign-in from the authorization URL to the client's
    redirect URI, filling the login form and approving the consent form."""

    def __init__(self, user: tuple[str, str], decision: str = "approve") -> None:
        self.user = user
        self.decision = decision
        self.pages: list[str] = []

    async def sign_in(self, authorization_url: str) -> dict[str, str]:
        async with httpx.AsyncClient(follow_redirects=False, timeout=30) as browser:
            answer = await browser.get(authorization_url)
            while True:
                if answer.status_code in (302, 303):
                    location = urllib.parse.urljoin(str(answer.url), answer.headers["location"])
                    if location.startswith(REDIRECT):
                        return dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(location).query))
                    answer = await browser.get(location)
                    continue
                assert answer.status_code == 200, answer.text
                self.pages.append(answer.text)
                form = form_of(answer.text)
                if "username" in answer.text and 'name="password"' in answer.text:
                    fields = {**form["fields"], "username": self.user[0], "password": self.user[1]}
                else:
                    fields = {**form["fields"], "decision": self.decision}
                answer = await browser.post(urllib.parse.urljoin(str(answer.url), form["action"]), data=fields)


def form_of(page: str) -> dict[str, Any]:
    action = re.search(r'<form method="post" action="([^"]+)"', page)
    assert action is not None, page
    fields = {
        html.unescape(name): html.unescape(value)
        for name, value in re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', page)
    }
    return {"action": html.unescape(action.group(1)), "fields": fields}


class MemoryStorage:
    def __init__(self) -> None:
        self.tokens: Any = None
        self.client_info: Any = None

    async def get_tokens(self) -> Any:
        return self.tokens

    async def set_tokens(self, tokens: Any) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> Any:
        return self.client_info

    async def set_client_info(self, client_info: Any) -> None:
        self.client_info = client_info


def oauth_provider(
    endpoint: str, agent: UserAgent, storage: MemoryStorage, client_metadata_url: str | None = None
) -> Any:
    from mcp.client.auth import OAuthClientProvider
    from mcp.shared.auth import AuthorizationCodeResult, OAuthClientMetadata

    pending: dict[str, str] = {}

    async def redirect(url: str) -> None:
        pending.update(await agent.sign_in(url))

    async def callback() -> AuthorizationCodeResult:
        return AuthorizationCodeResult(code=pending["code"], state=pending.get("state"), iss=pending.get("iss"))

    metadata = OAuthClientMetadata.model_validate(
        {
            "client_name": "SDK test client",
            "redirect_uris": [REDIRECT],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "none",
        }
    )
    return OAuthClientProvider(
        endpoint,
        metadata,
        storage,
        redirect_handler=redirect,
        callback_handler=callback,
        client_metadata_url=client_metadata_url,
    )


async def with_sdk_client(endpoint: str, provider: Any, work: Any, mode: str = "legacy") -> Any:
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    async with create_mcp_http_client(auth=provider) as http:
        async with Client(streamable_http_client(endpoint, http_client=http), mode=mode) as client:
            return await work(client)


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
def test_the_sdk_client_registers_signs_the_user_in_and_submits_an_analysis(builtin_stack, mode):
    # Given the stack with its own authorization server, and a client that knows only the endpoint's URL
    stack, endpoint_url, issuer, user = builtin_stack
    endpoint = f"{endpoint_url}/mcp"
    agent, storage = UserAgent(user), MemoryStorage()
    provider = oauth_provider(endpoint, agent, storage)

    # When it lists the tools in this protocol era (which makes it discover, register and sign the user in), then
    # submits an analysis
    async def session(client: Any) -> tuple[list[str], str]:
        tools = [tool.name for tool in (await client.list_tools()).tools]
        claims = jwt.decode(storage.tokens.access_token, options={"verify_signature": False})
        user_id = f"oauth:{claims['iss']}:{claims['sub']}"
        [sales] = [u for u in stack.environment.seed_datasets(owners=(user_id,)) if u.endswith("/sales.csv")]
        result = await client.call_tool("submit_analysis", {"dataset_url": sales})
        return tools, result.structured_content["jobId"]

    tools, job_id = asyncio.run(with_sdk_client(endpoint, provider, session, mode))
    stack.settle()

    # Then the client registered itself, the user saw the login and a consent page naming the client, and the
    # job ran as the user
    assert storage.client_info.client_id and storage.client_info.client_secret is None
    assert any("Sign in (local Cognito)" in page for page in agent.pages)
    assert any("SDK test client" in page and "127.0.0.1" in page for page in agent.pages)
    assert "submit_analysis" in tools and job_id
    claims = jwt.decode(storage.tokens.access_token, options={"verify_signature": False})
    assert (claims["iss"], claims["aud"], claims["tier"]) == (issuer, endpoint, "free")

    async def fetch(client: Any) -> dict:
        return (await client.call_tool("get_job", {"job_id": job_id})).structured_content

    job = asyncio.run(with_sdk_client(endpoint, provider, fetch, mode))
    assert (job["status"], job["result"]["rowCount"]) == ("SUCCEEDED", 6)


def test_refresh_rotates_reuse_revokes_the_family_and_revocation_ends_the_grant(builtin_stack):
    # Given a user signed in through the SDK client
    _, endpoint_url, issuer, user = builtin_stack
    endpoint = f"{endpoint_url}/mcp"
    storage = MemoryStorage()
    asyncio.run(with_sdk_client(endpoint, oauth_provider(endpoint, UserAgent(user), storage), _list_tools))
    client_id, first = storage.client_info.client_id, storage.tokens

    def refresh(token: str) -> httpx.Response:
        form = {"grant_type": "refresh_token", "refresh_token": token, "client_id": client_id}
        return httpx.post(f"{issuer}/token", data=form, timeout=30)

    # When the refresh token is used, reused, and the rotated one is revoked in a fresh sign-in's family
    rotated = refresh(first.refresh_token)
    reused = refresh(first.refresh_token)
    after_reuse = refresh(rotated.json()["refresh_token"])

    # Then: rotation, then invalid_grant for the reuse and for the whole family; the endpoint still takes the
    # rotated access token until it expires (access tokens are short-lived JWTs)
    assert rotated.status_code == 200 and rotated.json()["refresh_token"] != first.refresh_token
    assert (reused.status_code, reused.json()["error"]) == (400, "invalid_grant")
    assert (after_reuse.status_code, after_reuse.json()["error"]) == (400, "invalid_grant")
    assert tools_list(endpoint, rotated.json()["access_token"]).status_code == 200

    # And revoking a fresh grant's refresh token ends it
    storage.tokens = None
    asyncio.run(with_sdk_client(endpoint, oauth_provider(endpoint, UserAgent(user), storage), _list_tools))
    second = storage.tokens.refresh_token
    revoked = httpx.post(
        f"{issuer}/revoke", data={"token": second, "client_id": storage.client_info.client_id}, timeout=60
    )
    assert revoked.status_code == 200
    assert refresh(second).json()["error"] == "invalid_grant"


def test_the_sdk_client_signs_in_with_a_client_id_metadata_document_instead_of_registering(builtin_stack, monkeypatch):
    # Given the SDK's client with a metadata document URL. The SDK takes https URLs only; the local stack's document
    # server is plain http on loopback (which the local stack's policy allows the server to fetch), so the SDK's
    # https check alone is relaxed here: everything else is its own flow.
    import mcp.client.auth.oauth2 as sdk_oauth

    monkeypatch.setattr(sdk_oauth, "is_valid_client_metadata_url", lambda url: url.startswith("http://127.0.0.1:"))
    _, endpoint_url, issuer, user = builtin_stack
    endpoint = f"{endpoint_url}/mcp"
    document_url, server = serve_document({"client_name": "SDK document client", "redirect_uris": [REDIRECT]})
    agent, storage = UserAgent(user), MemoryStorage()
    try:
        # When it lists the tools (discovery, then the flow with its document's URL as client_id)
        provider = oauth_provider(endpoint, agent, storage, client_metadata_url=document_url)
        tools = asyncio.run(with_sdk_client(endpoint, provider, _list_tools))
    finally:
        server.close()

    # Then it never registered: its client_id is the document's URL, the server fetched the document, the consent
    # page named the document's client, and the token is for that client
    assert "submit_analysis" in tools
    assert storage.client_info.client_id == document_url
    # (each environment caches the document: /authorize and /token may be answered by two environments)
    assert set(server.paths) == {"/oauth/client.json"} and len(server.paths) <= 2
    assert any("SDK document client" in page for page in agent.pages)
    claims = jwt.decode(storage.tokens.access_token, options={"verify_signature": False})
    assert (claims["client_id"], claims["iss"]) == (document_url, issuer)


def test_a_client_id_metadata_document_client_signs_in_on_the_local_stack(builtin_stack):
    # Given a client known by the URL of its metadata document (http on loopback: the local stack's policy)
    _, endpoint_url, issuer, user = builtin_stack
    document_url, server = serve_document({"client_name": "Doc client", "redirect_uris": [REDIRECT]})
    try:
        verifier, challenge = pkce()
        query = {
            "response_type": "code",
            "client_id": document_url,
            "redirect_uri": REDIRECT,
            "code_challenge": challenge,
            "code_challenge_method": "S256",
            "state": "s-1",
            "resource": f"{endpoint_url}/mcp",
        }

        # When the user signs in and the client exchanges the code
        agent = UserAgent(user)
        answer = asyncio.run(agent.sign_in(f"{issuer}/authorize?{urllib.parse.urlencode(query)}"))
        tokens = httpx.post(
            f"{issuer}/token",
            data={
                "grant_type": "authorization_code",
                "code": answer["code"],
                "redirect_uri": REDIRECT,
                "client_id": document_url,
                "code_verifier": verifier,
            },
            timeout=30,
        )
    finally:
        server.close()

    # Then the consent named the document's client, and the token is for its URL
    assert answer["state"] == "s-1"
    assert any("Doc client" in page for page in agent.pages)
    assert tokens.status_code == 200, tokens.text
    claims = jwt.decode(tokens.json()["access_token"], options={"verify_signature": False})
    assert claims["client_id"] == document_url


def tools_list(endpoint: str, access_token: str) -> httpx.Response:
    """tools/list over plain HTTP with a bearer access token."""
    return httpx.post(
        endpoint,
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        headers={
            "authorization": f"Bearer {access_token}",
            "accept": "application/json, text/event-stream",
            "mcp-protocol-version": "2025-11-25",
        },
        timeout=30,
    )


async def _list_tools(client: Any) -> list[str]:
    return [tool.name for tool in (await client.list_tools()).tools]


def pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    return verifier, base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()


def serve_document(metadata: dict[str, Any]) -> tuple[str, LoopbackServer]:
    """A client ID metadata document on a loopback URL: (its URL, the server)."""

    def document(_: str) -> tuple[bytes, str]:
        return json.dumps({**metadata, "client_id": url}).encode(), "application/json"

    server = LoopbackServer(document)
    url = f"{server.origin}/oauth/client.json"
    return url, server


def test_the_banner_names_the_authorization_server_and_the_test_user(builtin_stack):
    # Given `make dev AUTH=builtin` with its seeded test user
    stack, endpoint_url, issuer, user = builtin_stack

    # When the banner is written
    text = banner(stack, 1.0, {}, user)

    # Then it names the endpoint, the issuer and the user's credentials, and no client-credentials token line
    assert f"{endpoint_url}/mcp" in text and f"authorization server: {issuer}" in text
    assert user[0] in text and user[1] in text
    assert "grant_type=client_credentials" not in text


def test_the_local_server_answers_on_localhost_and_127_0_0_1_with_its_one_issuer(builtin_stack):
    # Given the local stack: the issuer it wrote to the server's parameter is the 127.0.0.1 URL
    _, _, issuer, _ = builtin_stack
    assert issuer.startswith("http://127.0.0.1:")
    on_localhost = issuer.replace("127.0.0.1", "localhost")

    # When a client reads the metadata and starts a sign-in through localhost
    metadata = httpx.get(f"{on_localhost}/.well-known/oauth-authorization-server", timeout=30)
    authorize = httpx.get(f"{on_localhost}/authorize?client_id=c&state=s", timeout=30)

    # Then the metadata names the one issuer, and the sign-in is sent there (cookies and pages on one origin)
    assert metadata.status_code == 200 and metadata.json()["issuer"] == issuer
    assert authorize.status_code == 307 and authorize.headers["location"] == f"{issuer}/authorize?client_id=c&state=s"
