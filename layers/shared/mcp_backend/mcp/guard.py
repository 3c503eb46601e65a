"""The HTTP edge of the MCP endpoint: what the SDK's stateless Streamable HTTP app does not do itself.

The SDK (mcp 2.3.0) answers GET with an open SSE stream and DELETE with its own 405 (Allow: GET, POST,
DELETE), redirects `/mcp/` with a 307, answers a non-JSON Content-Type with 400 and matches allowed
hosts exactly (no `*.lambda-url.<region>.on.aws`). This guard answers those before the SDK sees them,
answers CORS preflights for the allowed origins (the SDK has no CORS), serves the RFC 9728 metadata in
OAuth mode, authenticates the caller (and, for an access token, checks the called tool's scope), and
makes every event stream proxy-safe, kept alive and always closed.
Everything else (406, parse errors, both protocol eras, 202 for notifications) is the SDK's own.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio
import anyio.to_thread
import pydantic_core
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mcp_backend.api_keys import Principal
from mcp_backend.mcp.auth import AuthenticationUnavailable, Authenticator, ScopedPrincipal
from mcp_backend.mcp.request_body import BODY_SCOPE_KEY, BodyTooLarge, ClientDisconnected, buffered_body
from mcp_backend.mcp.scopes import METADATA_PATH, required_access
from mcp_backend.observability import count_limit_refusal, count_refusal, logger
from mcp_backend.ratelimit import SLOT_RETRY_AFTER_SECONDS, RateDecision, RateLimitUnavailable
from mcp_backend.stack_urls import StackUrl, StackUrlUnavailable
from mcp_backend.tools.table import Access
from mcp_backend.tracing.spans import annotate, span

PRINCIPAL_SCOPE_KEY = "mcp_backend.principal"
HEADERS_SCOPE_KEY = "mcp_backend.headers"
HEALTH_PATH = "/healthz"
# The largest request body served: a batch of 100 submissions is a few tens of KiB, and the Function URL itself
# takes 6 MB. Configurable (MCP_MAX_BODY_BYTES); a longer body is a 413 before anything parses it.
DEFAULT_MAX_BODY_BYTES = 256 * 1024
# JSON-RPC messages nest a handful of levels; deeper bodies are refused before any parser (the SDK's, or the
# scope check's) recurses into them.
MAX_JSON_DEPTH = 64
# A JSON string (escapes included) or one bracket: brackets inside strings do not nest anything. Linear in the
# body: the possessive loops never give back what they matched, and a string with no closing quote runs to the
# end of the body (a lone backslash included), so no attempt fails after scanning ahead and none is retried from
# a later quote. (`"(?:[^"\\]|\\.)*"` rescanned to the end from every escaped quote: quadratic.)
_JSON_STRING_OR_BRACKET = re.compile(rb'"(?:[^"\\]++|\\.)*+(?:"|\\?\Z)|[\[\]{}]', re.DOTALL)
_STREAM_OPENED = b": stream open\r\n\r\n"
_KEEPALIVE = b": keepalive\r\n\r\n"
# CORS (https://fetch.spec.whatwg.org/#http-cors-protocol): what a browser page on an allowed origin may send,
# and which response headers its script may read. Authorization is never covered by a wildcard, so every
# header is named; Mcp-Param-<name> headers (2026-07-28) are per tool, so they are allowed by prefix.
CORS_METHODS = b"GET, POST"
CORS_REQUEST_HEADERS = frozenset(
    {
        "authorization",
        "content-type",
        "accept",
        "last-event-id",
        "mcp-protocol-version",
        "mcp-session-id",
        "mcp-method",
        "mcp-name",
        "x-correlation-id",
    }
)
CORS_PARAM_HEADER_PREFIX = "mcp-param-"
CORS_EXPOSED_HEADERS = b"WWW-Authenticate, MCP-Protocol-Version, Retry-After, X-Correlation-Id"
CORS_MAX_AGE_SECONDS = b"600"


class PrincipalRateLimit(Protocol):
    """A principal's requests per window (mcp_backend.ratelimit, with the principal's tier limit)."""

    def admit_locally(self, principal: Principal) -> RateDecision | None:
        """The decision without I/O, or None when `take` must ask the shared counter."""

    def take(self, principal: Principal) -> RateDecision:
        """The decision; blocking I/O (run in a worker thread)."""


class PrincipalCallSlots(Protocol):
    """A principal's calls that may run at once across instances (mcp_backend.ratelimit.InFlightSlots, with the
    principal's tier limit), for the requests that need a slot."""

    def needed(self, body: bytes) -> bool:
        """Whether this body's calls hold a slot while they run."""

    def limit(self, principal: Principal) -> int:
        """The principal's tier's cap."""

    def take(self, principal: Principal) -> Any:
        """A held slot, or None when every one is held; blocking I/O (run in a worker thread)."""

    def give_back(self, lease: Any) -> None:
        """Free the slot; blocking I/O, never raises."""


def principal_of(scope: Scope) -> Principal | None:
    return scope.get(PRINCIPAL_SCOPE_KEY)


@dataclass(frozen=True)
class HostPolicy:
    """Allowed Host and Origin values: exact, `name:*` (any port) or `*.suffix` (one DNS label deep)."""

    hosts: tuple[str, ...]
    origins: tuple[str, ...] = ()
    _host_patterns: tuple[re.Pattern[str], ...] = field(init=False, repr=False, compare=False)
    _origin_patterns: tuple[re.Pattern[str], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_host_patterns", tuple(_pattern(h) for h in self.hosts))
        object.__setattr__(self, "_origin_patterns", tuple(_pattern(o) for o in self.origins))

    @classmethod
    def for_region(cls, region: str, extra_hosts: Iterable[str] = (), origins: Iterable[str] = ()) -> HostPolicy:
        # A function cannot read its own URL (the URL resource depends on it): allow the region's URL form.
        return cls(hosts=(f"*.lambda-url.{region}.on.aws", *extra_hosts), origins=tuple(origins))

    def host_allowed(self, host: str | None) -> bool:
        return bool(host) and any(p.fullmatch(host.lower()) for p in self._host_patterns)  # type: ignore[union-attr]

    def origin_allowed(self, origin: str | None) -> bool:
        # Origin is absent for non-browser clients; when a browser sends one it must be allowed.
        return origin is None or any(p.fullmatch(origin.lower()) for p in self._origin_patterns)


def _pattern(allowed: str) -> re.Pattern[str]:
    text = re.escape(allowed.lower())
    text = text.replace(r"\*\.", r"[a-z0-9-]+\.")  # *.suffix: one label
    text = re.sub(r":\\\*$", r":[0-9]+", text)  # name:* -> any port
    return re.compile(text)


class McpHttpGuard:
    """ASGI middleware in front of the SDK app, mounted at `path` (and `path/`, never redirected)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        path: str,
        hosts: HostPolicy,
        authenticator: Authenticator,
        keepalive_seconds: float = 15.0,
        on_principal: Callable[[Principal], None] | None = None,
        resource: str = "",
        tool_access: Mapping[str, Access] | None = None,
        rate_limit: PrincipalRateLimit | None = None,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        call_slots: PrincipalCallSlots | None = None,
        pinned_resource: StackUrl | None = None,
    ) -> None:
        self.app = app
        self.path = path.rstrip("/") or "/"
        self.hosts = hosts
        self.authenticator = authenticator
        self.keepalive_seconds = keepalive_seconds
        self.on_principal = on_principal
        # This endpoint's URL as tokens name it (their audience). Empty: tokens are bound by the configured
        # audiences or client ids only, and https://<Host><path> names the endpoint in metadata and challenges,
        # never as an accepted audience (every Function URL host of the region passes the Host check).
        self.resource = resource
        # The stack's own authorization server only: this endpoint's URL as the template wrote it to a parameter
        # (read at the first token, off the event loop), the accepted audience when no resource is configured.
        self.pinned_resource = pinned_resource
        self.tool_access = dict(tool_access or {})
        # Counts each authenticated request against the principal's tier (mcp_backend.ratelimit).
        self.rate_limit = rate_limit
        self.max_body_bytes = max_body_bytes
        # Holds one of the principal's slots while a call that reaches the network, or a request that waits for a
        # task, runs (429 at the cap).
        self.call_slots = call_slots

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The checks in the order the MCP transport requires; each step answers the request itself and
        returns None (or False) when it must not go on."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)  # lifespan: the SDK's session manager starts here
            return
        headers = request_headers(scope)
        if await self.answer_health_check(scope, send):
            return
        checked_send = await self.check_host_and_origin(scope, headers, send)
        if checked_send is None:
            return
        send = checked_send
        if await self.answer_outside_the_endpoint(scope, headers, send) or await self.refuse_declared_oversize(
            headers, send
        ):
            return
        principal = await self.authenticate(scope, headers, send)
        if principal is None:
            return
        if self.rate_limit is not None and not await self.rate_limit_admits(self.rate_limit, principal, send):
            return
        request = await self.read_json_body(headers, receive, send, self.max_body_bytes)
        if request is None:
            return
        body, receive = request
        if not await self.scope_allows(principal, body, headers, send):
            return
        if self.on_principal is not None:
            self.on_principal(principal)
        inner = dict(scope)
        inner[PRINCIPAL_SCOPE_KEY] = principal
        inner[BODY_SCOPE_KEY] = body
        inner["path"] = self.path  # `/mcp/` is the same endpoint, not a 307
        inner["raw_path"] = self.path.encode()
        await self.serve_in_a_call_slot(principal, body, inner, receive, send)

    @staticmethod
    async def answer_health_check(scope: Scope, send: Send) -> bool:
        """The Lambda Web Adapter's readiness check, answered before anything else."""
        if scope["path"] == HEALTH_PATH and scope["method"] in ("GET", "HEAD"):
            await _plain(send, 200, b"ok")
            return True
        return False

    async def check_host_and_origin(self, scope: Scope, headers: dict[str, str], send: Send) -> Send | None:
        """421 for a host not allowed, 403 for an origin not allowed, 204 for a CORS preflight; else the send
        to answer with (with CORS headers for a browser's allowed origin)."""
        if not self.hosts.host_allowed(headers.get("host")):
            await _plain(send, 421, b"Misdirected Request: host not allowed")
            return None
        origin = headers.get("origin")
        if not self.hosts.origin_allowed(origin):
            await _plain(send, 403, b"Forbidden: origin not allowed")  # and no CORS headers: the page reads nothing
            return None
        if origin is None:
            return send
        if scope["method"] == "OPTIONS" and "access-control-request-method" in headers:
            await _preflight(send, origin, headers.get("access-control-request-headers", ""))
            return None
        return _with_cors(send, origin)

    async def answer_outside_the_endpoint(self, scope: Scope, headers: dict[str, str], send: Send) -> bool:
        """The RFC 9728 metadata (OAuth mode), 404 for other paths, 405 for other methods: answered here."""
        path = scope["path"].rstrip("/")
        if path in (METADATA_PATH, METADATA_PATH + self.path) and scope["method"] in ("GET", "HEAD"):
            document = self.authenticator.metadata(await self._named_resource(headers))
            if document is not None:  # RFC 9728: public, no credentials
                await _json(send, 200, document)
                return True
        if path != self.path:
            await _plain(send, 404, b"Not Found")
            return True
        if scope["method"] != "POST":
            # Stateless: no GET stream to resume and no session to DELETE.
            await _plain(send, 405, b"Method Not Allowed", [(b"allow", b"POST")])
            return True
        return False

    async def refuse_declared_oversize(self, headers: dict[str, str], send: Send) -> bool:
        """413 for a Content-Length over the cap, before authentication or any read (a body sent without a length
        is cut off at the cap while it is read)."""
        declared = headers.get("content-length", "")
        if not declared.isdigit() or int(declared) <= self.max_body_bytes:
            return False
        await _body_too_large(send, self.max_body_bytes)
        return True

    async def authenticate(self, scope: Scope, headers: dict[str, str], send: Send) -> Principal | None:
        """The caller named by the one Authorization header; else 400 (several), 401 (none or invalid, with
        the challenge) or 503 (keys or JWKS unavailable) is answered and None returned."""
        if sum(1 for name, _ in scope["headers"] if name.lower() == b"authorization") > 1:
            # Ambiguous credentials: which one a proxy or framework honours differs, so none is.
            await _json(send, 400, _rpc_error(-32600, "Bad Request: send exactly one Authorization header"))
            return None
        scheme, _, token = headers.get("authorization", "").partition(" ")
        token = token.strip() if scheme.lower() == "bearer" else ""
        try:
            # Only the Authorization header counts: a token in the query string or body is never read.
            audience = self.resource or (await self._pinned_resource() if self.pinned_resource and token else "")
            # A span per step that may wait (tracing on: mcp_backend.tracing), children of the request's.
            with span("guard authenticate"):
                principal = await self.authenticator.authenticate(token, audience) if token else None
        except Exception as error:  # noqa: BLE001 - keys or JWKS unavailable: say so, never a 500 with a trace
            retry_after = error.retry_after_seconds if isinstance(error, AuthenticationUnavailable) else 5
            if not getattr(error, "logged", False):
                logger.error("authentication unavailable", extra={"error_type": type(error).__name__})
            await _json(
                send,
                503,
                _rpc_error(-32603, "Service Unavailable: try again shortly"),
                [(b"retry-after", str(retry_after).encode())],
            )
            return None
        if principal is not None:
            annotate({"app.principal.tier": principal.tier})
        else:
            count_refusal("InvalidToken" if token else "NoToken")
            challenge = self.authenticator.challenge(await self._named_resource(headers), bool(token)).encode()
            await _json(send, 401, _rpc_error(-32001, "Unauthorized"), [(b"www-authenticate", challenge)])
        return principal

    @staticmethod
    async def rate_limit_admits(rate_limit: PrincipalRateLimit, principal: Principal, send: Send) -> bool:
        """Count the request; answer 429 (over the tier's rate) or 503 (the counter is unavailable) and
        return False when it must not reach the SDK."""
        try:
            # Most requests are admitted from this instance's lease, without I/O and without a thread hop.
            decision = rate_limit.admit_locally(principal)
            if decision is None:
                with span("guard rate_limit"):
                    decision = await anyio.to_thread.run_sync(rate_limit.take, principal)
        except RateLimitUnavailable as error:
            # Fail closed: a caller is never served unlimited because the counter cannot be reached.
            logger.error("request rate limit unavailable", extra={"error_type": str(error)})
            await _json(
                send, 503, _rpc_error(-32603, "Service Unavailable: try again shortly"), [(b"retry-after", b"5")]
            )
            return False
        if decision.allowed:
            return True
        count_limit_refusal("requests_per_minute", principal.tier, principal.user_id)
        message = (
            f"Too Many Requests: requests_per_minute limit of {decision.limit} for tier {principal.tier}; "
            f"retry after {decision.retry_after_seconds} s"
        )
        retry_after = str(decision.retry_after_seconds).encode()
        await _json(send, 429, _rpc_error(-32029, message), [(b"retry-after", retry_after)])
        return False

    @staticmethod
    async def read_json_body(
        headers: dict[str, str], receive: Receive, send: Send, max_bytes: int
    ) -> tuple[bytes, Receive] | None:
        """The whole JSON body and a receive replaying it; 415 for another media type, 413 for a body over
        `max_bytes` (reading stops there), 400 for JSON nested too deep, nothing for a client that hung up
        (None returned)."""
        media_type = headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if media_type != "application/json":
            await _json(send, 415, _rpc_error(-32600, "Unsupported Media Type: use application/json"))
            return None
        try:
            # The whole body before the SDK runs (the Web Adapter hands the app a complete body anyway): a client
            # that hangs up while sending it leaves here, instead of failing inside the SDK as a 500 with a trace.
            body, replay = await buffered_body(receive, max_bytes)
        except ClientDisconnected:
            return None  # nobody is left to answer; RequestTelemetry logs and counts the hang-up
        except BodyTooLarge:
            await _body_too_large(send, max_bytes)
            return None
        if json_nesting_exceeds(body, MAX_JSON_DEPTH):
            count_refusal("JsonTooDeep")
            message = f"Parse error: JSON nested deeper than {MAX_JSON_DEPTH} levels"
            await _json(send, 400, _rpc_error(-32700, message))
            return None
        return body, replay

    async def scope_allows(self, principal: Principal, body: bytes, headers: dict[str, str], send: Send) -> bool:
        """An access token's scopes decide which tools it may call (the body names the tool): 403 with the
        insufficient_scope challenge otherwise. API-key callers may call every tool."""
        if not isinstance(principal, ScopedPrincipal):
            return True
        missing = sorted(required_access(body, self.tool_access) - principal.access)
        if not missing:
            return True
        count_refusal("InsufficientScope")
        challenge = self.authenticator.insufficient_scope(await self._named_resource(headers), missing[0]).encode()
        await _json(send, 403, _rpc_error(-32001, "Forbidden: insufficient scope"), [(b"www-authenticate", challenge)])
        return False

    async def serve_in_a_call_slot(
        self, principal: Principal, body: bytes, scope: Scope, receive: Receive, send: Send
    ) -> None:
        """Serve the request; a call that needs a slot (a network tool's, or a tasks/result that waits) takes one
        of the principal's first, and gives it back when it ends: 429 with Retry-After at the tier's cap, 503 when
        the slots cannot be read (fail closed)."""
        slots = self.call_slots
        if slots is None or not slots.needed(body):
            await self._serve(scope, receive, send)
            return
        try:
            with span("guard call_slot"):
                lease = await anyio.to_thread.run_sync(slots.take, principal)
        except RateLimitUnavailable as error:
            logger.error("calls-in-flight slots unavailable", extra={"error_type": str(error)})
            await _json(
                send, 503, _rpc_error(-32603, "Service Unavailable: try again shortly"), [(b"retry-after", b"5")]
            )
            return
        if lease is None:
            limit = slots.limit(principal)
            count_limit_refusal("calls_in_flight", principal.tier, principal.user_id)
            message = (
                f"Too Many Requests: calls_in_flight limit of {limit} for tier {principal.tier}; "
                f"retry after {SLOT_RETRY_AFTER_SECONDS} s, when one of your running calls has ended"
            )
            retry_after = [(b"retry-after", str(SLOT_RETRY_AFTER_SECONDS).encode())]
            await _json(send, 429, _rpc_error(-32029, message), retry_after)
            return
        try:
            await self._serve(scope, receive, send)
        finally:
            with anyio.CancelScope(shield=True):  # a client that hung up still frees its slot
                await anyio.to_thread.run_sync(slots.give_back, lease)

    async def _pinned_resource(self) -> str:
        assert self.pinned_resource is not None
        cached = self.pinned_resource.cached
        return cached if cached is not None else await anyio.to_thread.run_sync(self.pinned_resource.value)

    async def _named_resource(self, headers: dict[str, str]) -> str:
        """This endpoint's URL as metadata and challenges name it: the configured or pinned one; the Host's only
        without either, or while the pinned one cannot be read (named, never accepted as an audience)."""
        if self.resource:
            return self.resource
        if self.pinned_resource is not None:
            with contextlib.suppress(StackUrlUnavailable):  # logged where it was read
                return await self._pinned_resource()
        return f"https://{headers.get('host', '')}{self.path}"

    async def _serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Run the SDK app; an event stream gets proxy-safe headers, an opening comment, keepalives and an end."""
        stream = _GuardedResponse(send, self.keepalive_seconds)
        try:
            await self.app(scope, receive, stream.send)
        except Exception:  # noqa: BLE001 - the last line before the client: log it, answer without detail
            # The SDK turns tool failures into results; reaching here is a bug. No detail leaves the process.
            logger.exception("MCP request failed outside the SDK's error handling")
            if not stream.started:
                await _json(stream.write, 500, _rpc_error(-32603, "Internal error"))
        finally:
            await stream.end()


class _GuardedResponse:
    """One response of the SDK app on its way out: the session id dropped, an event stream made proxy-safe
    (no caching, no buffering), opened at once with a comment, kept alive while quiet, and always ended."""

    def __init__(self, send: Send, keepalive_seconds: float) -> None:
        self._send = send
        self._keepalive_seconds = keepalive_seconds
        # Only an event stream has one: a JSON answer (most requests) starts no task, and pays for no task group.
        self._keepalive_task: asyncio.Task[None] | None = None
        # Set when an event stream opens: from then on the SDK's writes and the keepalive task's never interleave.
        # A JSON answer has one writer (no keepalive task runs), and takes no lock.
        self._lock: anyio.Lock | None = None
        self.started = False
        self.ended = False
        self._last_write = 0.0

    async def write(self, message: Message) -> None:
        if self._lock is None:
            await self._write(message)
            return
        async with self._lock:
            await self._write(message)

    async def _write(self, message: Message) -> None:
        if self.ended:
            return
        await self._send(message)
        self._last_write = anyio.current_time()
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            self.ended = True

    async def send(self, message: Message) -> None:
        """The send the SDK app writes to."""
        if message["type"] != "http.response.start":
            await self.write(message)
            return
        self.started = True
        headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"mcp-session-id"]
        if not _header(headers, b"content-type").startswith(b"text/event-stream"):
            await self.write({**message, "headers": headers})
            return
        headers = [(k, v) for k, v in headers if k.lower() not in (b"cache-control", b"x-accel-buffering")]
        headers += [(b"cache-control", b"no-cache"), (b"x-accel-buffering", b"no")]
        self._lock = anyio.Lock()
        await self.write({**message, "headers": headers})
        # Flush headers and a first event now: the adapter streams once bytes arrive.
        await self.write({"type": "http.response.body", "body": _STREAM_OPENED, "more_body": True})
        self._keepalive_task = asyncio.get_running_loop().create_task(self._keepalive())

    async def end(self) -> None:
        """Stop the keepalives, then end the response if the app left it open. A keepalive that failed (its
        write raised) raises here."""
        keepalive, self._keepalive_task = self._keepalive_task, None
        if keepalive is not None:
            keepalive.cancel()
            await asyncio.wait([keepalive])  # a cancellation of this request still reaches it
            failure = None if keepalive.cancelled() else keepalive.exception()
            if failure is not None:
                raise failure
        if self.started and not self.ended:
            await self.write({"type": "http.response.body", "body": b"", "more_body": False})

    async def _keepalive(self) -> None:
        while not self.ended:
            await anyio.sleep(max(0.0, self._last_write + self._keepalive_seconds - anyio.current_time()))
            if not self.ended and anyio.current_time() - self._last_write >= self._keepalive_seconds:
                await self.write({"type": "http.response.body", "body": _KEEPALIVE, "more_body": True})


async def _preflight(send: Send, origin: str, requested: str) -> None:
    """204 for a preflight from an allowed origin: the methods, and those of the requested headers the endpoint
    reads (the browser refuses the request when one it needs is missing)."""
    names = (part.strip().lower() for part in requested.split(","))
    allowed = [name for name in names if name in CORS_REQUEST_HEADERS or _is_param_header(name)]
    headers = [
        (b"access-control-allow-origin", origin.encode("latin-1")),
        (b"access-control-allow-methods", CORS_METHODS),
        (b"access-control-max-age", CORS_MAX_AGE_SECONDS),
        (b"vary", b"Origin, Access-Control-Request-Method, Access-Control-Request-Headers"),
    ]
    if allowed:
        headers.append((b"access-control-allow-headers", ", ".join(allowed).encode("latin-1")))
    await send({"type": "http.response.start", "status": 204, "headers": headers})
    await send({"type": "http.response.body", "body": b"", "more_body": False})


def _is_param_header(name: str) -> bool:
    return name.startswith(CORS_PARAM_HEADER_PREFIX) and len(name) > len(CORS_PARAM_HEADER_PREFIX)


def _with_cors(send: Send, origin: str) -> Send:
    """Every response to an allowed origin may be read by its page, including the headers a client needs."""
    cors = [
        (b"access-control-allow-origin", origin.encode("latin-1")),
        (b"access-control-expose-headers", CORS_EXPOSED_HEADERS),
        (b"vary", b"Origin"),
    ]

    async def send_with_cors(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", []), *cors]}
        await send(message)

    return send_with_cors


def json_nesting_exceeds(body: bytes, limit: int) -> bool:
    """Whether `body` opens more than `limit` arrays/objects at once; a scan, no recursion, strings skipped."""
    if body.count(b"[") + body.count(b"{") <= limit:
        return False  # no deeper than its brackets, in strings or not: the usual body is never scanned
    depth = 0
    for match in _JSON_STRING_OR_BRACKET.finditer(body):
        token = match.group()
        if token in (b"[", b"{"):
            depth += 1
            if depth > limit:
                return True
        elif token in (b"]", b"}"):
            depth -= 1
    return False


async def _body_too_large(send: Send, max_bytes: int) -> None:
    count_refusal("BodyTooLarge")
    message = f"Payload Too Large: the request body is limited to {max_bytes} bytes"
    # The rest of the body is never read: the connection closes after this answer.
    await _json(send, 413, _rpc_error(-32600, message), [(b"connection", b"close")])


def holds_a_call_slot(body: bytes, tools: frozenset[str], methods: frozenset[str]) -> bool:
    """Whether a JSON-RPC body (one message or a batch) calls one of `tools` or is a request of one of `methods`,
    as either parser the SDK uses reads it. A body that names none of them, and has no escape that could spell one
    (\\u, or \\/ in a method), is not parsed."""
    escaped = b"\\u" in body or b"\\/" in body
    named = any(name.encode() in body for names in (tools, methods) for name in names)
    if not (tools or methods) or not (escaped or named):
        return False
    for parse in (pydantic_core.from_json, json.loads):
        try:
            parsed = parse(body)
        except (ValueError, RecursionError):
            continue  # the SDK refuses it before any tool runs
        messages = parsed if isinstance(parsed, list) else [parsed]
        for message in messages:
            if not isinstance(message, dict):
                continue
            method = message.get("method")
            if isinstance(method, str) and method in methods:
                return True
            if method != "tools/call":
                continue
            name = message["params"].get("name") if isinstance(message.get("params"), dict) else None
            if isinstance(name, str) and name in tools:
                return True
    return False


def request_headers(scope: Scope) -> dict[str, str]:
    """The request's headers by lower-cased name (the last of a repeated one), decoded once per request: the
    telemetry around the guard and the guard read the same dict (kept in the scope, never changed)."""
    headers = scope.get(HEADERS_SCOPE_KEY)
    if headers is None:
        headers = scope[HEADERS_SCOPE_KEY] = {
            k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]
        }
    return headers


def _header(headers: list[tuple[bytes, bytes]], name: bytes) -> bytes:
    return next((v.lower() for k, v in headers if k.lower() == name), b"")


def _rpc_error(code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}


async def _plain(send: Any, status: int, body: bytes, extra: list[tuple[bytes, bytes]] | None = None) -> None:
    headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers + (extra or [])})
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def _json(
    send: Any, status: int, payload: dict[str, Any], extra: list[tuple[bytes, bytes]] | None = None
) -> None:
    body = json.dumps(payload, separators=(",", ":")).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers + (extra or [])})
    await send({"type": "http.response.body", "body": body, "more_body": False})
