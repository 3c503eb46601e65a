"""What a 2025-era client declared at `initialize`, carried by the client itself: the `Mcp-Session-Id` the
endpoint answers `initialize` with is a sealed token, not a key to server state.

In the 2025 era a client says which server-to-client requests it answers (here: `elicitation`) only in its
`initialize`, and the endpoint is stateless: the request that needs to know (a tools/call that would ask its
user) lands on any execution environment. So `initialize` of a client that declares elicitation is answered
with a session id that seals (AES-256-GCM, the shared request-state key: mcp_backend.mcp.request_state_key) the
caller's principal, an expiry and the declared elicitation capability. The client echoes it on every request
(Streamable HTTP, "Session Management"); any environment opens it. No server state is kept.

A token that does not open (tampered, expired, sealed under another key) or names another principal is no
session: the call is served as one of a client that declared nothing. A client that declared no elicitation, or
an endpoint without the key, gets no session id (as before).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from mcp.server.request_state import InvalidRequestState

from mcp_backend.mcp.request_state_key import SharedRequestStateKey
from mcp_backend.observability import logger

SESSION_HEADER = b"mcp-session-id"
# How long a session id stays good: a working day of one client. The client then initializes again.
SESSION_TTL_SECONDS = 12 * 3600
# What is kept of the declared capability: a small object of flags (form, url); a larger one is not a client's.
MAX_CAPABILITY_BYTES = 1024
_VERSION = 1
# Sealed under the key that also seals requestState: the type keeps one from being taken for the other.
_TYPE = "mcp-session"


@dataclass(frozen=True)
class Session:
    """An opened session id: whose it is and the elicitation capability its client declared."""

    principal: str
    elicitation: dict[str, Any]


class SessionTokens:
    """Seals and opens session ids under the shared request-state key."""

    def __init__(self, key: SharedRequestStateKey, clock: Callable[[], float] = time.time) -> None:
        self.key = key
        self._clock = clock

    def issue(self, principal: str, capabilities: Any) -> str | None:
        """The session id for a client that declared elicitation; None when it declared none, or the key cannot
        be read (no session: the client is not asked). May read the key (a network call): off the event loop."""
        elicitation = capabilities.get("elicitation") if isinstance(capabilities, Mapping) else None
        if not isinstance(elicitation, Mapping):
            return None
        declared = dict(elicitation)
        if len(json.dumps(declared)) > MAX_CAPABILITY_BYTES:
            declared = {}
        claims = {
            "typ": _TYPE,
            "v": _VERSION,
            "sub": principal,
            "exp": int(self._clock()) + SESSION_TTL_SECONDS,
            "el": declared,
        }
        try:
            return self.key.seal(json.dumps(claims, separators=(",", ":")).encode())
        except InvalidRequestState:
            return None

    def open(self, token: str | None, principal: str) -> Session | None:
        """The session `token` names for `principal`, or None (none sent, or it does not open for this caller).
        May read the key (a network call): off the event loop."""
        if not token:
            return None
        try:
            claims = json.loads(self.key.unseal(token))
        except (InvalidRequestState, ValueError):
            logger.info("session id refused: it does not open")
            return None
        if not isinstance(claims, dict) or (claims.get("typ"), claims.get("v")) != (_TYPE, _VERSION):
            return None
        if not isinstance(claims.get("el"), dict):
            return None
        expires = claims.get("exp")
        if not isinstance(expires, int) or expires <= self._clock():
            logger.info("session id refused: expired")
            return None
        if claims.get("sub") != principal:
            logger.info("session id refused: another principal's")
            return None
        return Session(principal, claims["el"])


def session_header(scope: Mapping[str, Any]) -> str | None:
    """The request's one Mcp-Session-Id, or None (none, or several: ambiguous, so none counts)."""
    values = [value for name, value in scope["headers"] if name.lower() == SESSION_HEADER]
    return values[0].decode("latin-1") if len(values) == 1 else None
