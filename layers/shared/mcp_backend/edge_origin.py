"""Whether a request reached McpServer (or, with a custom domain, the authorization server) through the stack's
CloudFront distribution (Edge=CloudFront).

CloudFront adds a secret origin header (`x-origin-verify`, its value from the EdgeOriginSecret secret) to every
request it forwards; the Function URL stays public (AuthType NONE), so a request without that value went around
the edge, its WAF rules and its per-source rate limit, and is refused with 403 before anything else runs.
Origin access control is not used: for a POST it needs the viewer to send `x-amz-content-sha256`, which MCP
clients do not (docs/template-choices.md, "The edge").

The endpoint also admits a request signed by an IAM caller (the AWS_IAM Function URL, which never goes through
the edge): it passes that test as `exempt` (mcp_backend.mcp.iam_callers.signed_by_iam_caller).

While a rotation is under way CloudFront may still send the previous value: both the current and the previous
value are accepted (the secret keeps the previous one in `previous`).
"""

from __future__ import annotations

import hmac
import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import anyio.to_thread
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from mcp_backend.api_keys import SecretReader

Headers = list[tuple[bytes, bytes]]

ORIGIN_HEADER = b"x-origin-verify"


class EdgeOriginUnavailable(RuntimeError):
    """The origin secret cannot be read now: the endpoint answers 503, never 500 and never lets the request in."""


@dataclass(frozen=True)
class OriginValues:
    current: str
    previous: str = ""

    @classmethod
    def from_secret(cls, secret_string: str) -> OriginValues:
        """The secret's JSON ({"current": ..., "previous": ...}); EdgeOriginUnavailable for anything else."""
        try:
            document = json.loads(secret_string)
        except ValueError:
            raise EdgeOriginUnavailable("the edge origin secret is not JSON") from None
        current = document.get("current") if isinstance(document, dict) else None
        previous = document.get("previous", "") if isinstance(document, dict) else ""
        if not isinstance(current, str) or len(current) < 32 or not isinstance(previous, str):
            raise EdgeOriginUnavailable("the edge origin secret has no current value of at least 32 characters")
        return cls(current=current, previous=previous)


class EdgeOriginCheck:
    """The first check of a request when the edge is on: `admits(headers)` is False for a request that did not
    come through CloudFront (the caller answers 403). `read_secret` returns the secret string; it is called once
    per `cache_seconds` (the Parameters and Secrets extension caches it too). `exempt(headers)` True: admitted
    without the header (a caller that cannot come through the edge and is checked otherwise)."""

    def __init__(
        self,
        read_secret: Callable[[], str],
        clock: Callable[[], float],
        cache_seconds: float = 300.0,
        exempt: Callable[[Headers], bool] | None = None,
    ):
        self._read_secret = read_secret
        self._exempt = exempt
        self._clock = clock
        self._cache_seconds = cache_seconds
        self._values: OriginValues | None = None
        self._read_at = 0.0

    def admits(self, headers: Iterable[tuple[bytes, bytes]]) -> bool:
        headers = list(headers)
        if self._exempt is not None and self._exempt(headers):
            return True
        presented = next((value for name, value in headers if name.lower() == ORIGIN_HEADER), None)
        if presented is None:
            return False
        values = self._current_values()
        # compare_digest on every candidate: the time taken does not depend on which one matched.
        matches = [
            hmac.compare_digest(presented, candidate.encode()) for candidate in (values.current, values.previous)
        ]
        return any(matches) and presented != b""

    def fresh(self) -> bool:
        """Whether `admits` can answer without reading the secret (no I/O on the event loop)."""
        return self._values is not None and self._clock() - self._read_at < self._cache_seconds

    def _current_values(self) -> OriginValues:
        now = self._clock()
        if self._values is None or not self.fresh():
            try:
                secret_string = self._read_secret()
            except Exception:  # noqa: BLE001 - any failure to read closes the door (503), never opens it
                raise EdgeOriginUnavailable("the edge origin secret cannot be read") from None
            self._values = OriginValues.from_secret(secret_string)
            self._read_at = now
        return self._values


def from_settings(
    secret_id: str, cache_seconds: float, exempt: Callable[[Headers], bool] | None = None
) -> EdgeOriginCheck | None:
    """The check when the edge is on (EDGE_ORIGIN_SECRET_ID set by the template), else None."""
    if not secret_id:
        return None
    reader = SecretReader(secret_id)
    return EdgeOriginCheck(reader.read, clock=time.monotonic, cache_seconds=cache_seconds, exempt=exempt)


async def admit_or_refuse(check: EdgeOriginCheck | None, scope: Scope, send: Send) -> bool:
    """The guard's first step: True to go on; else the answer is sent (403 off the edge, 503 with Retry-After
    when the secret cannot be read) and the caller stops. With the edge off (`check` None) always True."""
    if check is None:
        return True
    headers = scope.get("headers", [])
    try:
        admitted = check.admits(headers) if check.fresh() else await anyio.to_thread.run_sync(check.admits, headers)
    except EdgeOriginUnavailable:
        answer = JSONResponse({"error": "temporarily unavailable"}, status_code=503, headers={"Retry-After": "5"})
        await answer(scope, _no_body, send)
        return False
    if not admitted:
        await JSONResponse({"error": "forbidden: not through the edge"}, status_code=403)(scope, _no_body, send)
    return admitted


class EdgeOnly:
    """ASGI, outside the guard: with the edge on, a request that did not come through CloudFront (nor from an
    IAM caller) is answered 403 before authentication, body reading or anything else. The adapter's readiness
    check (`/healthz`, from inside the execution environment) is let through."""

    def __init__(self, app: ASGIApp, check: EdgeOriginCheck | None, readiness_path: str = "/healthz") -> None:
        self.app = app
        self.check = check
        self.readiness_path = readiness_path

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") == self.readiness_path:
            await self.app(scope, receive, send)
        elif await admit_or_refuse(self.check, scope, send):
            await self.app(scope, receive, send)


async def _no_body() -> dict[str, object]:
    return {"type": "http.disconnect"}
