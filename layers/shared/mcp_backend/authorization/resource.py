"""Which RFC 8707 resource a token is for: its `aud`, and the one place this server decides it.

The MCP endpoint is the resource. Its URL comes from `AuthorizationResources` when that lists exactly one, else
from the SSM parameter the template writes (`OAuthResource`, or the endpoint's Function URL and `mcp`): the
endpoint names this server's URL, so this server's configuration cannot name the endpoint's. The parameter is
read once per instance. A request without `resource` (clients written to spec revisions before RFC 8707 was
required) gets the endpoint's URL; a request naming any other resource is `invalid_target`.

The issuer is pinned the same way: `AUTHORIZATION_ISSUER`, else the SSM parameter the template writes
(`AuthorizationIssuer`: this server's Function URL, which it cannot be told). The Host header decides neither.
"""

from __future__ import annotations

import urllib.parse
from typing import Any

from mcp.server.auth.provider import AuthorizeError

from mcp_backend.config import AuthorizationServerSettings
from mcp_backend.stack_urls import StackUrl, StackUrlUnavailable


def issuer_of(settings: AuthorizationServerSettings, ssm: Any = None) -> StackUrl | str:
    """The issuer as configured, or the parameter that holds it; ValueError when neither is set (fail closed)."""
    if settings.authorization_issuer:
        return settings.authorization_issuer.rstrip("/")
    if settings.authorization_issuer_parameter:
        return StackUrl(settings.authorization_issuer_parameter, ssm)
    raise ValueError("AUTHORIZATION_ISSUER or AUTHORIZATION_ISSUER_PARAMETER must be set")


class Resources:
    def __init__(self, settings: AuthorizationServerSettings, ssm: Any = None) -> None:
        self.settings = settings
        parameter = settings.authorization_resource_parameter
        self.endpoint = StackUrl(parameter, ssm) if parameter else None

    def allowed(self) -> tuple[str, ...]:
        """The resources tokens may be for; empty: any https URL (no list and no parameter: tests, a bare run)."""
        listed = self.settings.listed("resources")
        return listed if listed else ((self._endpoint_url(),) if self.endpoint is not None else ())

    def resolve(self, requested: str | None) -> str:
        """The resource a request's tokens are bound to, or the RFC error that refuses it."""
        allowed = self.allowed()
        if requested is None:
            if len(allowed) == 1:
                return allowed[0]
            raise AuthorizeError("invalid_request", "resource is required (RFC 8707)")
        parts = urllib.parse.urlsplit(requested)
        if parts.scheme not in ("https", "http") or not parts.hostname or parts.fragment:
            raise AuthorizeError("invalid_target", "resource must be an absolute URL without a fragment")
        if parts.scheme == "http" and not self.settings.authorization_allow_loopback_hosts:
            raise AuthorizeError("invalid_target", "resource must be an https URL")
        if allowed and requested not in allowed:
            raise AuthorizeError("invalid_target", "this server issues no tokens for that resource")
        return requested

    def _endpoint_url(self) -> str:
        assert self.endpoint is not None
        try:
            return self.endpoint.value()
        except StackUrlUnavailable:
            raise AuthorizeError("temporarily_unavailable", "try again shortly") from None
