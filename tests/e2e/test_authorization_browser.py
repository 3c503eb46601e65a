"""A real browser through the stack's own sign-in: headless Chromium (DevTools protocol) opens the authorization URL
of a registered client, signs the test user in on the local Cognito login page, approves the consent page, and
lands on the client's loopback redirect URI with a code the client exchanges for a token the endpoint accepts."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import hashlib
import json
import secrets
import urllib.parse
from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import jwt
import pytest
from mcp.client.auth import OAuthClientProvider
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthClientMetadata

from devstack.stack.cognito_login import seed_login_user
from tests.e2e.browser import Browser, LoopbackServer, started_browser
from tests.e2e.test_authorization_server import MemoryStorage, tools_list, with_sdk_client

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with started_browser() as running:
        yield running


@pytest.fixture
def redirect_listener() -> Iterator[LoopbackServer]:
    """The client's loopback redirect URI (RFC 8252): it records the query it is sent."""
    listener = LoopbackServer(lambda _: (b"<!doctype html><title>signed in</title>", "text/html"))
    yield listener
    listener.close()


def queries(listener: LoopbackServer) -> list[dict[str, str]]:
    return [dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(path).query)) for path in listener.paths]


def submit_after_load(browser: Browser, session: str, script: str) -> None:
    """Run a script that submits a form a moment later, then wait for the page it leads to (the delay lets the
    evaluation's answer arrive before the next page's load event)."""
    browser.evaluate(session, f"setTimeout(() => {{ {script} }}, 50); true")
    browser.wait_for("Page.loadEventFired", session)


@dataclasses.dataclass(frozen=True)
class SignIn:
    issuer: str
    endpoint: str
    user: tuple[str, str]
    client_id: str
    redirect_uri: str
    verifier: str
    url: str  # the authorization URL the client opens in the browser


def started_sign_in(start_stack, listener: LoopbackServer) -> SignIn:
    """The stack with its own authorization server and the test user, a client registered for a loopback URI,
    and the authorization URL it opens."""
    stack = start_stack(parameters={"AuthMode": "oauth", "AuthorizationServerMode": "builtin"})
    webs = {web.spec.logical_id: web for web in stack.web_functions.values()}
    issuer, endpoint = webs["AuthorizationServer"].url, f"{webs['McpServer'].url}/mcp"
    user = seed_login_user(stack.client("cognito-idp")) or ("", "")
    redirect_uri = f"{listener.origin}/callback"
    registered = httpx.post(
        f"{issuer}/register",
        json={"client_name": "Browser client", "redirect_uris": [redirect_uri], "token_endpoint_auth_method": "none"},
        timeout=60,
    ).json()
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    query = {
        "response_type": "code",
        "client_id": registered["client_id"],
        "redirect_uri": redirect_uri,
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        "state": "browser-state",
        "scope": "read submit",
        "resource": endpoint,
    }
    url = f"{issuer}/authorize?{urllib.parse.urlencode(query)}"
    return SignIn(issuer, endpoint, user, registered["client_id"], redirect_uri, verifier, url)


def log_in(browser: Browser, session: str, user: tuple[str, str]) -> None:
    """Fill and send the local Cognito login form on the page shown; wait for the page it leads to."""
    fill = (
        f"document.getElementById('username').value = {json.dumps(user[0])};"
        f"document.getElementById('password').value = {json.dumps(user[1])};"
        "document.querySelector('form').submit();"
    )
    submit_after_load(browser, session, fill)


def test_a_user_signs_in_and_consents_in_a_real_browser(browser, start_stack, redirect_listener):
    # Given the stack with its own authorization server, the test user, and a client registered for a loopback URI
    sign_in = started_sign_in(start_stack, redirect_listener)

    # When the browser opens the authorization URL, the user signs in and approves
    session = browser.open(sign_in.url)
    login_text = browser.evaluate(session, "document.body.innerText")
    log_in(browser, session, sign_in.user)
    consent_text = browser.evaluate(session, "document.body.innerText")
    submit_after_load(browser, session, "document.getElementById('approve').click();")

    # Then the login and consent pages were shown, and the redirect URI got a code and the state back
    assert "Sign in (local Cognito)" in login_text
    assert "Browser client" in consent_text and "127.0.0.1" in consent_text and "submit" in consent_text
    [answer] = queries(redirect_listener)
    assert answer["state"] == "browser-state" and answer["iss"] == sign_in.issuer

    # And the code is worth a token the endpoint accepts
    tokens = httpx.post(
        f"{sign_in.issuer}/token",
        data={
            "grant_type": "authorization_code",
            "code": answer["code"],
            "redirect_uri": sign_in.redirect_uri,
            "client_id": sign_in.client_id,
            "code_verifier": sign_in.verifier,
        },
        timeout=60,
    )
    assert tokens.status_code == 200, tokens.text
    listed = tools_list(sign_in.endpoint, tokens.json()["access_token"])
    assert listed.status_code == 200


def test_the_consent_page_fits_a_phone_screen(browser, start_stack, redirect_listener, tmp_path):
    # Given a sign-in opened on a phone-sized screen (390 x 844 CSS pixels)
    sign_in = started_sign_in(start_stack, redirect_listener)
    session = browser.open(sign_in.url, phone=(390, 844))

    # When the user signs in and reaches the consent page
    log_in(browser, session, sign_in.user)
    layout = browser.evaluate(
        session,
        "JSON.stringify({scroll: document.documentElement.scrollWidth, viewport: window.innerWidth,"
        " headline: document.querySelector('h1').innerText,"
        " buttons: ['approve', 'deny'].map(id => document.getElementById(id).getBoundingClientRect())"
        ".map(r => ({left: r.left, right: r.right, bottom: r.bottom, height: r.height}))})",
    )
    (tmp_path / "consent-390x844.png").write_bytes(browser.screenshot(session))

    # Then nothing scrolls sideways, the headline names where access goes, and both buttons are on screen at a
    # size a thumb can hit (48 CSS pixels is Android's and WCAG's usual target)
    found = json.loads(layout)
    assert found["viewport"] == 390 and found["scroll"] <= 390
    assert "127.0.0.1" in found["headline"]
    for button in found["buttons"]:
        assert 0 <= button["left"] and button["right"] <= 390 and button["bottom"] <= 844 and button["height"] >= 44


def test_a_login_link_finished_in_another_browser_issues_nothing(browser, start_stack, redirect_listener):
    # Given a sign-in started in one browser: it shows the login page, whose URL carries the sign-in
    sign_in = started_sign_in(start_stack, redirect_listener)
    started = browser.open(sign_in.url)
    login_url = browser.evaluate(started, "location.href")

    # When that login URL is opened in another browser (its own cookies) and the user signs in there
    other = browser.open(login_url, isolated=True)
    log_in(browser, other, sign_in.user)
    text = browser.evaluate(other, "document.body.innerText")

    # Then that browser is told the sign-in was started elsewhere, no consent form is shown, and the client's
    # redirect URI got nothing
    assert "started in another browser" in text
    assert browser.evaluate(other, "document.forms.length") == 0
    assert queries(redirect_listener) == []


@pytest.mark.parametrize("sends_resource", [True, False], ids=["with-resource", "without-resource"])
def test_the_sdk_client_signs_in_through_the_browser_on_a_loopback_port_it_never_registered(
    browser, start_stack, redirect_listener, sends_resource
):
    # Given the stack with its own authorization server, and a client registered as Claude Code's metadata
    # document registers it: a loopback redirect URI with no port (RFC 8252 section 7.3: any port matches)
    stack = start_stack(parameters={"AuthMode": "oauth", "AuthorizationServerMode": "builtin"})
    webs = {web.spec.logical_id: web for web in stack.web_functions.values()}
    issuer, endpoint = webs["AuthorizationServer"].url, f"{webs['McpServer'].url}/mcp"
    user = seed_login_user(stack.client("cognito-idp")) or ("", "")
    registration = {
        "client_name": "Loopback client",
        "redirect_uris": ["http://127.0.0.1/callback"],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
    }
    registered = httpx.post(f"{issuer}/register", json=registration, timeout=60)
    assert registered.status_code == 201, registered.text
    storage = MemoryStorage()
    storage.client_info = OAuthClientInformationFull.model_validate(registered.json())

    # When the SDK's OAuth client, redirecting to the port its listener happened to get (not the registered one),
    # hands the authorization URL to a real browser (a client of an earlier revision sends no resource), and the
    # user signs in and approves there
    def sign_in_in_the_browser(url: str) -> None:
        if not sends_resource:
            parts = urllib.parse.urlsplit(url)
            query = [(k, v) for k, v in urllib.parse.parse_qsl(parts.query) if k != "resource"]
            url = urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(query)))
        session = browser.open(url)
        log_in(browser, session, user)
        submit_after_load(browser, session, "document.getElementById('approve').click();")

    async def redirect(url: str) -> None:
        await anyio.to_thread.run_sync(sign_in_in_the_browser, url)

    async def callback() -> AuthorizationCodeResult:
        [answer] = queries(redirect_listener)
        return AuthorizationCodeResult(code=answer["code"], state=answer.get("state"), iss=answer.get("iss"))

    metadata = OAuthClientMetadata.model_validate(
        {**registration, "redirect_uris": [f"{redirect_listener.origin}/callback"]}
    )
    provider = OAuthClientProvider(endpoint, metadata, storage, redirect_handler=redirect, callback_handler=callback)

    async def tools(client: Any) -> list[str]:
        return [tool.name for tool in (await client.list_tools()).tools]

    listed = asyncio.run(with_sdk_client(endpoint, provider, tools))

    # Then the sign-in ended at the unregistered port with a code, and the token it bought is for this stack's
    # endpoint (the audience the server gives a request without resource too) and lists the tools
    assert redirect_listener.paths and redirect_listener.paths[0].startswith("/callback?")
    claims = jwt.decode(storage.tokens.access_token, options={"verify_signature": False})
    assert (claims["iss"], claims["aud"]) == (issuer, endpoint)
    assert "submit_analysis" in listed
