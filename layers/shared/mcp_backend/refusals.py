"""What the endpoint answers instead of serving a request: one small type per kind of refusal, each rendered in
one place (the MCP guard's `render`), so every limit answers the same way: its HTTP status, a JSON-RPC error
naming the limit and the tier, and Retry-After when waiting helps. Never a 5xx with detail, never a timeout."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# A JSON-RPC error code for a request over a limit (the server-defined range, -32000 to -32099).
TOO_MANY_REQUESTS = -32029
UNAUTHORIZED = -32001
INVALID_REQUEST = -32600
PARSE_ERROR = -32700
METHOD_NOT_FOUND = -32601
INTERNAL_ERROR = -32603
# How long a caller should wait when a store the limits need cannot be reached.
UNAVAILABLE_RETRY_AFTER_SECONDS = 5


class AuthenticationUnavailable(RuntimeError):
    """Credentials cannot be checked right now: the endpoint answers 503 with Retry-After, never 401 or 500.

    `logged` says the cause was already logged (once per interval), so the guard does not log it per request."""

    logged = False

    def __init__(self, message: str, retry_after_seconds: int = 5) -> None:
        super().__init__(message)
        self.retry_after_seconds = retry_after_seconds


@dataclass(frozen=True, slots=True)
class Answer:
    """A response the guard sends itself: `body` as text/plain (or `payload` as JSON when given)."""

    status: int
    body: bytes = b""
    headers: tuple[tuple[bytes, bytes], ...] = ()
    payload: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Refusal:
    """A request refused with a JSON-RPC error: `limit_name` and `tier` say which limit refused whom."""

    status: int
    code: int
    message: str
    limit_name: str = ""
    tier: str = ""
    retry_after: int | None = None
    headers: tuple[tuple[bytes, bytes], ...] = ()
    request_id: Any = None

    def payload(self) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "id": self.request_id, "error": {"code": self.code, "message": self.message}}


@dataclass(frozen=True, slots=True)
class OverLimit(Refusal):
    """429: the caller's tier allows no more now."""

    @classmethod
    def of(cls, limit_name: str, tier: str, maximum: int, retry_after: int, until: str = "") -> OverLimit:
        message = f"Too Many Requests: {limit_name} limit of {maximum} for tier {tier}; retry after {retry_after} s"
        return cls(429, TOO_MANY_REQUESTS, message + until, limit_name, tier, retry_after)


@dataclass(frozen=True, slots=True)
class TooLarge(Refusal):
    """413: the body is over the cap (the rest of it is never read: the connection closes)."""

    @classmethod
    def of(cls, max_bytes: int) -> TooLarge:
        message = f"Payload Too Large: the request body is limited to {max_bytes} bytes"
        return cls(413, INVALID_REQUEST, message, "max_body_bytes", headers=((b"connection", b"close"),))


@dataclass(frozen=True, slots=True)
class Unavailable(Refusal):
    """503: a store the limit needs cannot be asked; refused rather than served unlimited (fail closed)."""

    @classmethod
    def of(cls, limit_name: str, retry_after: int = UNAVAILABLE_RETRY_AFTER_SECONDS) -> Unavailable:
        return cls(503, INTERNAL_ERROR, "Service Unavailable: try again shortly", limit_name, retry_after=retry_after)


@dataclass(frozen=True, slots=True)
class NoSuchDoor(Refusal):
    """A JSON-RPC method with no entry in the door table: method not found (as the SDK answers a method it does
    not serve), before the SDK sees it."""

    @classmethod
    def of(cls, method: str, request_id: Any = None) -> NoSuchDoor:
        return cls(200, METHOD_NOT_FOUND, "Method not found", request_id=request_id)
