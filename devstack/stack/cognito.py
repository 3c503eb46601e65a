"""Cognito on the local stack: the template's user pool, domain, resource server and client created in moto,
and the client-credentials token endpoint moto lacks.

moto's cognito-idp creates pools and clients and serves each pool's JWKS at `/<pool id>/.well-known/jwks.json`,
but has no `/oauth2/token` (that lives on a pool's domain on AWS). `ClientCredentialsTokens` plays it: it
checks the client id and secret against moto's client (its AllowedOAuthFlows and AllowedOAuthScopes), and
signs an RS256 access token shaped like Cognito's (no `aud`; `client_id`, `scope`, `token_use: access`,
`sub` = the client id) with the key moto signs its own tokens with, so the pool's JWKS verifies it.
That key ships inside moto: local tokens are real JWTs, never secrets.
https://docs.aws.amazon.com/cognito/latest/developerguide/token-endpoint.html
"""

from __future__ import annotations

import base64
import hmac
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import jwt

from devstack.stack.moto_internals import cognito_signing_key

# moto signs every pool's tokens with this key (kid "dummy") and serves its public half as every pool's JWKS.
_MOTO_SIGNING_KEY = cognito_signing_key()
_UNIT_SECONDS = {"seconds": 1, "minutes": 60, "hours": 3600, "days": 86400}
_CLIENT_PROPERTIES = (
    "ClientName", "GenerateSecret", "AllowedOAuthFlows", "AllowedOAuthFlowsUserPoolClient", "AllowedOAuthScopes",
    "SupportedIdentityProviders", "AccessTokenValidity", "TokenValidityUnits", "EnableTokenRevocation",
    "PreventUserExistenceErrors", "ExplicitAuthFlows", "CallbackURLs",
)  # fmt: skip


def create_user_pool(cognito: Any, name: str, props: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    request = {"PoolName": props.get("UserPoolName") or name}
    if "AdminCreateUserConfig" in props:
        request["AdminCreateUserConfig"] = props["AdminCreateUserConfig"]
    pool = cognito.create_user_pool(**request)["UserPool"]
    return pool["Id"], {"Arn": pool["Arn"], "UserPoolId": pool["Id"], "ProviderName": _provider_name(pool)}


def _provider_name(pool: dict[str, Any]) -> str:
    region = pool["Id"].split("_", 1)[0]
    return f"cognito-idp.{region}.amazonaws.com/{pool['Id']}"


def create_resource_server(cognito: Any, props: dict[str, Any]) -> str:
    cognito.create_resource_server(
        UserPoolId=props["UserPoolId"],
        Identifier=props["Identifier"],
        Name=props["Name"],
        Scopes=props.get("Scopes", []),
    )
    return str(props["Identifier"])


def create_user_pool_client(cognito: Any, props: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    request = {key: props[key] for key in _CLIENT_PROPERTIES if key in props}
    client = cognito.create_user_pool_client(UserPoolId=props["UserPoolId"], **request)["UserPoolClient"]
    return client["ClientId"], {"ClientId": client["ClientId"], "ClientSecret": client.get("ClientSecret", "")}


def create_user_pool_domain(cognito: Any, props: dict[str, Any]) -> str:
    cognito.create_user_pool_domain(UserPoolId=props["UserPoolId"], Domain=props["Domain"])
    return str(props["Domain"])


class ClientCredentialsTokens:
    """POST /oauth2/token with grant_type=client_credentials, answered as a Cognito pool's domain answers it."""

    def __init__(self, cognito: Callable[[], Any], region: str, clock: Callable[[], float] = time.time) -> None:
        self.cognito = cognito
        self.region = region
        self.clock = clock

    def issue(self, form: Mapping[str, str], authorization: str | None) -> tuple[int, dict[str, Any]]:
        if form.get("grant_type") != "client_credentials":
            return 400, {"error": "unsupported_grant_type"}
        client_id, secret = _client_credentials(form, authorization)
        found = self._client(client_id) if client_id else None
        if found is None or not hmac.compare_digest(found.get("ClientSecret", "").encode(), secret.encode()):
            return 400, {"error": "invalid_client"}
        if "client_credentials" not in found.get("AllowedOAuthFlows", []):
            return 400, {"error": "unauthorized_client"}
        allowed = found.get("AllowedOAuthScopes", [])
        scopes = form.get("scope", "").split() or allowed
        if not scopes or set(scopes) - set(allowed):
            return 400, {"error": "invalid_scope"}
        validity = (
            int(found.get("AccessTokenValidity", 60))
            * _UNIT_SECONDS[found.get("TokenValidityUnits", {}).get("AccessToken", "minutes")]
        )
        now = int(self.clock())
        claims = {
            "sub": client_id,
            "token_use": "access",
            "scope": " ".join(scopes),
            "auth_time": now,
            "iss": f"https://cognito-idp.{self.region}.amazonaws.com/{found['UserPoolId']}",
            "exp": now + validity,
            "iat": now,
            "version": 2,
            "jti": str(uuid.uuid4()),
            "client_id": client_id,
        }
        key = jwt.algorithms.RSAAlgorithm.from_jwk(_MOTO_SIGNING_KEY)
        token = jwt.encode(claims, key, algorithm="RS256", headers={"kid": _MOTO_SIGNING_KEY["kid"]})  # type: ignore[arg-type]
        return 200, {"access_token": token, "expires_in": validity, "token_type": "Bearer"}

    def _client(self, client_id: str) -> dict[str, Any] | None:
        cognito = self.cognito()
        for pool in cognito.list_user_pools(MaxResults=60)["UserPools"]:
            for client in cognito.list_user_pool_clients(UserPoolId=pool["Id"], MaxResults=60)["UserPoolClients"]:
                if client["ClientId"] == client_id:
                    described = cognito.describe_user_pool_client(UserPoolId=pool["Id"], ClientId=client_id)
                    return dict(described["UserPoolClient"])
        return None


def machine_clients(cognito: Any) -> list[tuple[str, str]]:
    """(client id, secret) of every client-credentials client in the local Cognito."""
    found = []
    for pool in cognito.list_user_pools(MaxResults=60)["UserPools"]:
        for listed in cognito.list_user_pool_clients(UserPoolId=pool["Id"], MaxResults=60)["UserPoolClients"]:
            client = cognito.describe_user_pool_client(UserPoolId=pool["Id"], ClientId=listed["ClientId"])
            client = client["UserPoolClient"]
            if "client_credentials" in client.get("AllowedOAuthFlows", []):
                found.append((client["ClientId"], client.get("ClientSecret", "")))
    return found


def _client_credentials(form: Mapping[str, str], authorization: str | None) -> tuple[str, str]:
    """HTTP Basic (what Cognito documents for a confidential client), else client_id/client_secret in the form."""
    scheme, _, value = (authorization or "").partition(" ")
    if scheme.lower() == "basic":
        try:
            client_id, _, secret = base64.b64decode(value).decode().partition(":")
            return client_id, secret
        except ValueError:
            return "", ""
    return form.get("client_id", ""), form.get("client_secret", "")
