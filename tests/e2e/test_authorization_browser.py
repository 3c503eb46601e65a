"""A real browser through the stack's own sign-in: headless Chromium (DevTools protocol) opens the authorization URL
of a registered client, signs the test user in on the local Cognito login page, approves the consent page, and
lands on the client's loopback redirect URI with a code the client exchanges for a token the endpoint accepts."""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import urllib.parse
from collections.abc import Iterator

import httpx
import pytest

from devstack.stack.cognito_login import seed_login_user
from tests.e2e.browser import Browser, LoopbackServer, started_browser
from tests.e2e.test_authorization_server import tools_list

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


def test_a_user_signs_in_and_consents_in_a_real_browser(browser, start_stack, redirect_listener):
    # Given the stack with its own authorization server, the test user, and a client registered for a loopback URI
    stack = start_stack(parameters={"AuthMode": "oauth", "AuthorizationServerMode": "builtin"})
    webs = {web.spec.logical_id: web for web in stack.web_functions.values()}
    issuer, endpoint = webs["AuthorizationServer"].url, f"{webs['McpServer'].url}/mcp"
    user, password = seed_login_user(stack.client("cognito-idp")) or ("", "")
    registered = httpx.post(
        f"{issuer}/register",
        json={
            "client_name": "Browser client",
            "redirect_uris": [f"{redirect_listener.origin}/callback"],
            "token_endpoint_auth_method": "none",
        },
        timeout=60,
    ).json()
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    query = {
        "response_type": "code",
        "client_id": registered["client_id"],
        "redirect_uri": f"{redirect_listener.origin}/callback",
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        "state": "browser-state",
        "scope": "read submit",
        "resource": endpoint,
    }

    # When the browser opens the authorization URL, the user signs in and approves
    session = browser.open(f"{issuer}/authorize?{urllib.parse.urlencode(query)}")
    login_text = browser.evaluate(session, "document.body.innerText")
    fill = (
        f"document.getElementById('username').value = {json.dumps(user)};"
        f"document.getElementById('password').value = {json.dumps(password)};"
        "document.querySelector('form').submit();"
    )
    submit_after_load(browser, session, fill)
    consent_text = browser.evaluate(session, "document.body.innerText")
    submit_after_load(browser, session, "document.getElementById('approve').click();")

    # Then the login and consent pages were shown, and the redirect URI got a code and the state back
    assert "Sign in (local Cognito)" in login_text
    assert "Browser client" in consent_text and "127.0.0.1" in consent_text and "submit" in consent_text
    [answer] = queries(redirect_listener)
    assert answer["state"] == "browser-state" and answer["iss"] == issuer

    # And the code is worth a token the endpoint accepts
    tokens = httpx.post(
        f"{issuer}/token",
        data={
            "grant_type": "authorization_code",
            "code": answer["code"],
            "redirect_uri": f"{redirect_listener.origin}/callback",
            "client_id": registered["client_id"],
            "code_verifier": verifier,
        },
        timeout=60,
    )
    assert tokens.status_code == 200, tokens.text
    listed = tools_list(endpoint, tokens.json()["access_token"])
    assert listed.status_code == 200
