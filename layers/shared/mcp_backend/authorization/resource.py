"""Which RFC 8707 resource a token is for: its `aud`, and the one place this server decides it.

The MCP endpoint is the resource. Its URL comes from `AuthorizationResources` when that lists exactly one, else
from the SSM parameter the template writes (`OAuthResource`, or the endpoint's Function URL and `mcp`): the
endpoint names this server's URL, so this server's configuration cannot name the endpoint's. The parameter is
read once per instance. A request without `resource` (clients written to spec revisions before RFC 8707 was
required) gets the endpoint's URL; a request naming any other resource is `invalid_target`.
"""

from __future__ import annotations

import threading
import urllib.parse
from typing import Any

from mcp.server.auth.provider import AuthorizeError

from mcp_backend.aws import botocore_errors, client_or_lazy
from mcp_backend.config import AuthorizationServerSettings
from mcp_backend.observability import logger


class Resources:
    def __init__(self, settings: AuthorizationServerSettings, ssm: Any = None) -> None:
        self.settings = settings
        self.ssm = client_or_lazy(ssm, "ssm") if settings.authorization_resource_parameter else None
        self._endpoint: str | None = None
        self._lock = threading.Lock()

    def allowed(self) -> tuple[str, ...]:
        """The resources tokens may be for; empty: any https URL (no list and no parameter: tests, a bare run)."""
        listed = self.settings.listed("resources")
        return listed if listed else ((self._endpoint_url(),) if self.ssm is not None else ())

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
        assert self.ssm is not None
        with self._lock:
            if self._endpoint is None:
                try:
                    answer = self.ssm.get_parameter(Name=self.settings.authorization_resource_parameter)
                except (botocore_errors.ClientError, botocore_errors.BotoCoreError) as error:
                    logger.error("endpoint resource unreadable", extra={"error_type": type(error).__name__})
                    raise AuthorizeError("temporarily_unavailable", "try again shortly") from None
                self._endpoint = str(answer["Parameter"]["Value"])
            return self._endpoint
