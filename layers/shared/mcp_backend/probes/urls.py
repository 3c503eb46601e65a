"""Which endpoint URLs may be registered and probed: https on public addresses, except on the local stack."""

from __future__ import annotations

from urllib.parse import urlsplit

from mcp_backend.tools.errors import ToolError
from mcp_backend.tools.fetch import public_addresses

MAX_URL_LENGTH = 2048


class UnsafeEndpointUrl(ValueError):
    """Not an http(s) URL a probe may call; the message never echoes resolved addresses."""


def check_endpoint_url(url: str, *, allow_private_hosts: bool, resolve: bool = True) -> str:
    """The URL, if a probe may call it: https (http too on the local stack), no userinfo, and a host that
    resolves only to public addresses unless `allow_private_hosts` (the local stack's loopback endpoint)."""
    if len(url) > MAX_URL_LENGTH:
        raise UnsafeEndpointUrl("endpoint URL is too long")
    parts = urlsplit(url)
    schemes = {"https", "http"} if allow_private_hosts else {"https"}
    if parts.scheme not in schemes:
        raise UnsafeEndpointUrl(f"endpoint URL must use {' or '.join(sorted(schemes))}")
    if not parts.hostname or parts.username or parts.password:
        raise UnsafeEndpointUrl("endpoint URL needs a host and no user info (pass credentials as auth)")
    if parts.query or parts.fragment:
        # The URL travels into probe results, envelopes and alert e-mails: no room for a token in it.
        raise UnsafeEndpointUrl("endpoint URL must have no query string or fragment (pass credentials as auth)")
    if resolve and not allow_private_hosts:
        try:
            public_addresses(parts.hostname, parts.port or 443, parts.hostname)
        except ToolError:
            raise UnsafeEndpointUrl("endpoint host does not resolve to public addresses only") from None
    return url
