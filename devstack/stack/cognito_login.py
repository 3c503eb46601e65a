"""Cognito's managed login on the local stack: the OpenID Connect provider the authorization server signs users in
with, played for the pools moto holds (moto has no login pages and no authorization-code grant).

- `GET <lambda url>/<pool id>/.well-known/openid-configuration`: the pool's discovery document, its issuer
  `<lambda url>/<pool id>` (the local stand-in for https://cognito-idp.<region>.amazonaws.com/<pool id>), its
  JWKS moto's own (served on the AWS port);
- `GET /oauth2/authorize`: a login page (user name and password) for an app client whose CallbackURLs hold the
  redirect URI exactly, with PKCE S256 as Cognito requires for a public client;
- `POST /oauth2/authorize`: the password is checked by moto (AdminInitiateAuth), then a one-time code goes back
  to the redirect URI with the state;
- `POST /oauth2/token` with grant_type=authorization_code: the code, client, redirect URI and verifier checked,
  an ID token signed with moto's pool key (`cognito:groups` from the user's groups, `email`, the nonce).

`seed_login_user` adds the banner's test user to every pool with an authorization-code client.
https://docs.aws.amazon.com/cognito/latest/developerguide/authorization-endpoint.html
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import html
import secrets
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any

import jwt

from devstack.stack.moto_internals import cognito_signing_key

_MOTO_SIGNING_KEY = cognito_signing_key()
CODE_SECONDS = 300
TEST_USER = "dev@example.com"


class LocalManagedLogin:
    def __init__(self, cognito: Callable[[], Any], base_url: str, aws_url: str) -> None:
        self.cognito = cognito
        self.base_url = base_url
        self.aws_url = aws_url
        self._codes: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def discovery(self, pool_id: str) -> dict[str, Any]:
        issuer = f"{self.base_url}/{pool_id}"
        return {
            "issuer": issuer,
            "authorization_endpoint": f"{self.base_url}/oauth2/authorize",
            "token_endpoint": f"{self.base_url}/oauth2/token",
            "jwks_uri": f"{self.aws_url}/{pool_id}/.well-known/jwks.json",
            "response_types_supported": ["code"],
            "id_token_signing_alg_values_supported": ["RS256"],
            "code_challenge_methods_supported": ["S256"],
        }

    def login_page(self, query: Mapping[str, str], error: str = "") -> tuple[int, str]:
        found = self._client(query.get("client_id", ""))
        if found is None or query.get("redirect_uri") not in found[1].get("CallbackURLs", []):
            return 400, _page("<p>Unknown client or redirect_uri.</p>")
        if query.get("response_type") != "code" or query.get("code_challenge_method") != "S256":
            return 400, _page("<p>response_type=code with PKCE S256 is required.</p>")
        fields = "".join(
            f'<input type="hidden" name="{html.escape(k)}" value="{html.escape(v)}">'
            for k, v in query.items()
            if k in ("client_id", "redirect_uri", "state", "nonce", "code_challenge", "scope", "response_type")
        )
        body = (
            "<h1>Sign in (local Cognito)</h1>"
            + (f'<p id="error">{html.escape(error)}</p>' if error else "")
            + '<form method="post" action="/oauth2/authorize">'
            + fields
            + '<input type="hidden" name="code_challenge_method" value="S256">'
            + '<label>User <input name="username" id="username"></label> '
            + '<label>Password <input name="password" id="password" type="password"></label> '
            + '<button type="submit" id="signin">Sign in</button></form>'
        )
        return 200, _page(body)

    def sign_in(self, form: Mapping[str, str]) -> tuple[int, str, str | None]:
        """(status, page, redirect location): a location when the password is right."""
        found = self._client(form.get("client_id", ""))
        if found is None or form.get("redirect_uri") not in found[1].get("CallbackURLs", []):
            status, page = self.login_page(form)
            return status, page, None
        pool_id, client = found
        username, password = form.get("username", ""), form.get("password", "")
        cognito = self.cognito()
        try:
            cognito.admin_initiate_auth(
                UserPoolId=pool_id,
                ClientId=client["ClientId"],
                AuthFlow="ADMIN_USER_PASSWORD_AUTH",
                AuthParameters={"USERNAME": username, "PASSWORD": password},
            )
            user = cognito.admin_get_user(UserPoolId=pool_id, Username=username)
            groups = cognito.admin_list_groups_for_user(UserPoolId=pool_id, Username=username)["Groups"]
        except cognito.exceptions.ClientError:
            status, page = self.login_page(form, "Incorrect user name or password.")
            return 401 if status == 200 else status, page, None
        attributes = {a["Name"]: a["Value"] for a in user["UserAttributes"]}
        code = secrets.token_urlsafe(32)
        with self._lock:
            self._codes[code] = {
                "pool_id": pool_id,
                "client_id": client["ClientId"],
                "redirect_uri": form["redirect_uri"],
                "challenge": form.get("code_challenge", ""),
                "nonce": form.get("nonce"),
                "sub": attributes.get("sub", username),
                "email": attributes.get("email", username),
                "username": username,
                "groups": [group["GroupName"] for group in groups],
                "expires": time.time() + CODE_SECONDS,
            }
        query = {"code": code, **({"state": form["state"]} if form.get("state") else {})}
        return 302, "", f"{form['redirect_uri']}?{urllib.parse.urlencode(query)}"

    def exchange(self, form: Mapping[str, str]) -> tuple[int, dict[str, Any]]:
        with self._lock:
            grant = self._codes.pop(form.get("code", ""), None)
        if grant is None or grant["expires"] < time.time():
            return 400, {"error": "invalid_grant"}
        verifier = form.get("code_verifier", "")
        challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
        if (
            form.get("client_id") != grant["client_id"]
            or form.get("redirect_uri") != grant["redirect_uri"]
            or not hmac.compare_digest(challenge, grant["challenge"])
        ):
            return 400, {"error": "invalid_grant"}
        now = int(time.time())
        claims = {
            "iss": f"{self.base_url}/{grant['pool_id']}",
            "sub": grant["sub"],
            "aud": grant["client_id"],
            "token_use": "id",
            "iat": now,
            "exp": now + 3600,
            "auth_time": now,
            "email": grant["email"],
            "cognito:username": grant["username"],
            "cognito:groups": grant["groups"],
            **({"nonce": grant["nonce"]} if grant["nonce"] else {}),
        }
        key = jwt.algorithms.RSAAlgorithm.from_jwk(_MOTO_SIGNING_KEY)
        id_token = jwt.encode(claims, key, algorithm="RS256", headers={"kid": _MOTO_SIGNING_KEY["kid"]})  # type: ignore[arg-type]
        return 200, {"id_token": id_token, "token_type": "Bearer", "expires_in": 3600}

    def _client(self, client_id: str) -> tuple[str, dict[str, Any]] | None:
        if not client_id:
            return None
        cognito = self.cognito()
        for pool in cognito.list_user_pools(MaxResults=60)["UserPools"]:
            for listed in cognito.list_user_pool_clients(UserPoolId=pool["Id"], MaxResults=60)["UserPoolClients"]:
                if listed["ClientId"] == client_id:
                    described = cognito.describe_user_pool_client(UserPoolId=pool["Id"], ClientId=client_id)
                    client = described["UserPoolClient"]
                    return (pool["Id"], client) if "code" in client.get("AllowedOAuthFlows", []) else None
        return None


def login_clients(cognito: Any) -> list[tuple[str, dict[str, Any]]]:
    """(pool id, client) of every authorization-code client in the local Cognito."""
    found = []
    for pool in cognito.list_user_pools(MaxResults=60)["UserPools"]:
        for listed in cognito.list_user_pool_clients(UserPoolId=pool["Id"], MaxResults=60)["UserPoolClients"]:
            client = cognito.describe_user_pool_client(UserPoolId=pool["Id"], ClientId=listed["ClientId"])
            if "code" in client["UserPoolClient"].get("AllowedOAuthFlows", []):
                found.append((pool["Id"], client["UserPoolClient"]))
    return found


def seed_login_user(cognito: Any) -> tuple[str, str] | None:
    """The test user (name, a fresh password) in every pool with a login client; None when there is none."""
    pools = {pool_id for pool_id, _ in login_clients(cognito)}
    if not pools:
        return None
    # Every class a pool's password policy may require, whatever the random part holds (it lacks a digit about
    # one time in fifteen): upper, lower, symbol and digit.
    password = "Dev-7" + secrets.token_urlsafe(12)
    for pool_id in pools:
        try:
            cognito.admin_create_user(
                UserPoolId=pool_id,
                Username=TEST_USER,
                MessageAction="SUPPRESS",
                UserAttributes=[{"Name": "email", "Value": TEST_USER}, {"Name": "email_verified", "Value": "true"}],
            )
        except cognito.exceptions.UsernameExistsException:
            pass
        cognito.admin_set_user_password(UserPoolId=pool_id, Username=TEST_USER, Password=password, Permanent=True)
    return TEST_USER, password


def set_callback_urls(cognito: Any, client_name: str, callback: str) -> None:
    """Point a login client's CallbackURLs at its app's loopback URL (the template names its Function URL)."""
    for pool_id, client in login_clients(cognito):
        if client.get("ClientName") == client_name:
            keep = {
                key: client[key]
                for key in ("ClientName", "AllowedOAuthFlows", "AllowedOAuthScopes", "SupportedIdentityProviders")
                if key in client
            }
            cognito.update_user_pool_client(
                UserPoolId=pool_id,
                ClientId=client["ClientId"],
                CallbackURLs=[callback],
                AllowedOAuthFlowsUserPoolClient=True,
                **keep,
            )


def _page(body: str) -> str:
    return (
        '<!doctype html><html><head><meta charset="utf-8"><title>Local sign-in</title></head>'
        f'<body style="font-family:sans-serif;max-width:40em;margin:2em auto">{body}</body></html>'
    )
