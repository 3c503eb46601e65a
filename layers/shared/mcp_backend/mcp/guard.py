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
from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import Any, Protocol

import anyio
import anyio.to_thread
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mcp_backend.api_keys import Principal
from mcp_backend.call_slots import SLOT_RETRY_AFTER_SECONDS
from mcp_backend.doors import HEALTH_PATH, MCP_POST, METADATA_PATH, METHODS, TOOL_DOORS, Door, DoorTable
from mcp_backend.hosts import HostPolicy
from mcp_backend.mcp.auth import CALLER, Authenticator, ScopedPrincipal
from mcp_backend.mcp.iam_callers import IamCallerAuthenticator
from mcp_backend.mcp.request_body import GUARDED_BODY, BodyTooLarge, ClientDisconnected, buffered_body
from mcp_backend.observability import count_limit_refusal, count_refusal, logger
from mcp_backend.refusals import (
    INVALID_REQUEST,
    PARSE_ERROR,
    UNAUTHORIZED,
    Answer,
    AuthenticationUnavailable,
    OverLimit,
    Refusal,
    TooLarge,
    Unavailable,
)
from mcp_backend.request_rate import RateDecision, RateLimitUnavailable
from mcp_backend.stack_urls import StackUrl, StackUrlUnavailable
from mcp_backend.tools.table import Access
from mcp_backend.tracing.spans import annotate, span

# The last request's decoded headers in this context, with its scope (each request runs in a context of its own).
_HEADERS: ContextVar[tuple[Scope, dict[str, str]] | None] = ContextVar("mcp_backend_headers", default=None)
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
CORS_EXPOSED_HEADERS = b"WWW-Authenticate, MCP-Protocol-Version, Mcp-Session-Id, Retry-After, X-Correlation-Id"
CORS_MAX_AGE_SECONDS = b"600"
# What the guard answers itself, made once.
HEALTHY = Answer(200, b"ok")
HOST_NOT_ALLOWED = Answer(421, b"Misdirected Request: host not allowed")
ORIGIN_NOT_ALLOWED = Answer(403, b"Forbidden: origin not allowed")
NOT_FOUND = Answer(404, b"Not Found")
METHOD_NOT_ALLOWED = Answer(405, b"Method Not Allowed", ((b"allow", b"POST"),))
HUNG_UP = Answer(0)  # the client left: nothing is sent
SEVERAL_CREDENTIALS = Refusal(400, INVALID_REQUEST, "Bad Request: send exactly one Authorization header")
UNSUPPORTED_MEDIA_TYPE = Refusal(415, INVALID_REQUEST, "Unsupported Media Type: use application/json")
TOO_DEEP = Refusal(400, PARSE_ERROR, f"Parse error: JSON nested deeper than {MAX_JSON_DEPTH} levels")
UNTIL_A_CALL_ENDS = ", when one of your running calls has ended"


class PrincipalRateLimit(Protocol):
    """A principal's requests per window (mcp_backend.request_rate, with the principal's tier limit)."""

    def admit_locally(self, principal: Principal) -> RateDecision | None:
        """The decision without I/O, or None when `take` must ask the shared counter."""

    def take(self, principal: Principal) -> RateDecision:
        """The decision; blocking I/O (run in a worker thread)."""


class PrincipalCallSlots(Protocol):
    """A principal's calls that may run at once across instances (mcp_backend.call_slots.InFlightSlots, with the
    principal's tier limit), for the doors that hold a slot (mcp_backend.doors)."""

    def limit(self, principal: Principal) -> int:
        """The principal's tier's cap."""

    def take(self, principal: Principal) -> Any:
        """A held slot, or None when every one is held; blocking I/O (run in a worker thread)."""

    def give_back(self, lease: Any) -> None:
        """Free the slot; blocking I/O, never raises."""


@dataclass(slots=True)
class GuardedRequest:
    """One request on its way through the guard's steps: what each step found, for the next."""

    scope: Scope
    headers: dict[str, str]
    receive: Receive
    send: Send
    principal: Principal | None = None
    body: bytes = b""
    door: Door | None = None
    message: Any = None  # the body's reading, when the door table made one every parser agrees on
    lease: Any = None


Step = Callable[[GuardedRequest], Awaitable[Answer | Refusal | None]]


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
        doors: DoorTable | None = None,
        iam_callers: IamCallerAuthenticator | None = None,
    ) -> None:
        """tool_access: tools' scopes over the tool table's doors (tests' own tools); doors: the endpoint's."""
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
        # IamCallers=Enabled: a request Lambda checked on the AWS_IAM Function URL names its caller in the request
        # context (mcp_backend.mcp.iam_callers); any other request is authenticated by its bearer token.
        self.iam_callers = iam_callers
        tool_doors = {**TOOL_DOORS, **{name: replace(MCP_POST, access=a) for name, a in (tool_access or {}).items()}}
        self.doors = doors or DoorTable(METHODS, tool_doors)
        # Counts each authenticated request against the principal's tier (mcp_backend.request_rate).
        self.rate_limit = rate_limit
        self.max_body_bytes = max_body_bytes
        # Holds one of the principal's slots while a call that reaches the network, or a request that waits for a
        # task, runs (429 at the cap).
        self.call_slots = call_slots
        self._too_large = TooLarge.of(max_body_bytes)
        self._steps: tuple[Step, ...] = (
            self.answer_health_check,
            self.check_host_and_origin,
            self.answer_outside_the_endpoint,
            self.refuse_declared_oversize,
            self.authenticate,
            self.rate_limit_admits,
            self.read_json_body,
            self.find_the_door,
            self.scope_allows,
            self.take_a_call_slot,  # last: a slot it takes is given back by serving, so no step may refuse after it
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The steps in the order the MCP transport requires: each returns what to answer instead of serving
        (an Answer, or a Refusal naming its limit), or None to go on; the first answer is rendered here."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)  # lifespan: the SDK's session manager starts here
            return
        request = GuardedRequest(scope, request_headers(scope), receive, send)
        for step in self._steps:
            answer = await step(request)
            if answer is not None:
                await render(request.send, answer)
                return
        principal = request.principal
        assert principal is not None and request.door is not None  # the steps above set both
        if self.on_principal is not None:
            self.on_principal(principal)
        inner = dict(scope)
        inner["path"] = self.path  # `/mcp/` is the same endpoint, not a 307
        inner["raw_path"] = self.path.encode()
        caller, guarded = CALLER.set(principal), GUARDED_BODY.set((request.body, request.message))
        try:
            await self.serve_in_a_call_slot(request, inner)
        finally:
            GUARDED_BODY.reset(guarded)
            CALLER.reset(caller)

    @staticmethod
    async def answer_health_check(request: GuardedRequest) -> Answer | None:
        """The Lambda Web Adapter's readiness check, answered before anything else."""
        if request.scope["path"] == HEALTH_PATH and request.scope["method"] in ("GET", "HEAD"):
            return HEALTHY
        return None

    async def check_host_and_origin(self, request: GuardedRequest) -> Answer | None:
        """421 for a host not allowed, 403 for an origin not allowed, 204 for a CORS preflight; else the request
        answers with CORS headers for a browser's allowed origin."""
        headers = request.headers
        if not self.hosts.host_allowed(headers.get("host")):
            return HOST_NOT_ALLOWED
        origin = headers.get("origin")
        if not self.hosts.origin_allowed(origin, headers.get("host")):
            return ORIGIN_NOT_ALLOWED  # and no CORS headers: the page reads nothing
        if origin is None:
            return None
        if request.scope["method"] == "OPTIONS" and "access-control-request-method" in headers:
            return _preflight(origin, headers.get("access-control-request-headers", ""))
        request.send = _with_cors(request.send, origin)
        return None

    async def answer_outside_the_endpoint(self, request: GuardedRequest) -> Answer | None:
        """The RFC 9728 metadata (OAuth mode), 404 for other paths, 405 for other methods: answered here."""
        scope = request.scope
        path = scope["path"].rstrip("/")
        if path in (METADATA_PATH, METADATA_PATH + self.path) and scope["method"] in ("GET", "HEAD"):
            document = self.authenticator.metadata(await self._named_resource(request.headers))
            if document is not None:  # RFC 9728: public, no credentials
                return Answer(200, payload=document)
        if path != self.path:
            return NOT_FOUND
        if scope["method"] != "POST":
            return METHOD_NOT_ALLOWED  # stateless: no GET stream to resume and no session to DELETE
        return None

    async def refuse_declared_oversize(self, request: GuardedRequest) -> Refusal | None:
        """413 for a Content-Length over the cap, before authentication or any read (a body sent without a length
        is cut off at the cap while it is read)."""
        declared = request.headers.get("content-length", "")
        if not declared.isdigit() or int(declared) <= self.max_body_bytes:
            return None
        count_refusal("BodyTooLarge")
        return self._too_large

    async def authenticate(self, request: GuardedRequest) -> Refusal | None:
        """The caller named by the one Authorization header; else 400 (several), 401 (none or invalid, with
        the challenge) or 503 (keys or JWKS unavailable)."""
        scope, headers = request.scope, request.headers
        if sum(1 for name, _ in scope["headers"] if name.lower() == b"authorization") > 1:
            # Ambiguous credentials: which one a proxy or framework honours differs, so none is.
            return SEVERAL_CREDENTIALS
        if self.iam_callers is not None and (signed := self.iam_callers.authenticate_request(scope["headers"])):
            # Lambda checked the SigV4 signature, which is what the Authorization header holds: no bearer token.
            annotate({"app.principal.tier": signed.tier})
            request.principal = signed
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
            return Unavailable.of("authentication", retry_after)
        if principal is None:
            count_refusal("InvalidToken" if token else "NoToken")
            challenge = self.authenticator.challenge(await self._named_resource(headers), bool(token)).encode()
            return Refusal(401, UNAUTHORIZED, "Unauthorized", headers=((b"www-authenticate", challenge),))
        annotate({"app.principal.tier": principal.tier})
        request.principal = principal
        return None

    async def rate_limit_admits(self, request: GuardedRequest) -> Refusal | None:
        """Count the request: 429 over the tier's rate, 503 when the counter is unavailable."""
        rate_limit, principal = self.rate_limit, request.principal
        if rate_limit is None or principal is None:
            return None
        try:
            # Most requests are admitted from this instance's lease, without I/O and without a thread hop.
            decision = rate_limit.admit_locally(principal)
            if decision is None:
                with span("guard rate_limit"):
                    decision = await anyio.to_thread.run_sync(rate_limit.take, principal)
        except RateLimitUnavailable as error:
            # Fail closed: a caller is never served unlimited because the counter cannot be reached.
            logger.error("request rate limit unavailable", extra={"error_type": str(error)})
            return Unavailable.of("requests_per_minute")
        if decision.allowed:
            return None
        count_limit_refusal("requests_per_minute", principal.tier, principal.user_id)
        return OverLimit.of("requests_per_minute", principal.tier, decision.limit, decision.retry_after_seconds)

    async def read_json_body(self, request: GuardedRequest) -> Answer | Refusal | None:
        """The whole JSON body, kept on the request with a receive replaying it; 415 for another media type, 413
        for a body over the cap (reading stops there), 400 for JSON nested too deep, nothing for a client that hung
        up."""
        media_type = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if media_type != "application/json":
            return UNSUPPORTED_MEDIA_TYPE
        try:
            # The whole body before the SDK runs (the Web Adapter hands the app a complete body anyway): a client
            # that hangs up while sending it leaves here, instead of failing inside the SDK as a 500 with a trace.
            request.body, request.receive = await buffered_body(request.receive, self.max_body_bytes)
        except ClientDisconnected:
            return HUNG_UP  # nobody is left to answer; RequestTelemetry logs and counts the hang-up
        except BodyTooLarge:
            count_refusal("BodyTooLarge")
            return self._too_large
        if json_nesting_exceeds(request.body, MAX_JSON_DEPTH):
            count_refusal("JsonTooDeep")
            return TOO_DEEP
        return None

    async def find_the_door(self, request: GuardedRequest) -> Refusal | None:
        """The request's door from the door table (mcp_backend.doors): a method with no entry is refused."""
        door, request.message = self.doors.read(request.body)
        if isinstance(door, Refusal):
            count_refusal("NoSuchDoor")
            return door
        request.door = door
        return None

    async def scope_allows(self, request: GuardedRequest) -> Refusal | None:
        """An access token's scopes decide which doors it may use (the door says what it needs): 403 with the
        insufficient_scope challenge otherwise. API-key callers may use every door."""
        principal, door = request.principal, request.door
        if not isinstance(principal, ScopedPrincipal) or door is None:
            return None
        missing = sorted(door.access - principal.access)
        if not missing:
            return None
        count_refusal("InsufficientScope")
        challenge = self.authenticator.insufficient_scope(
            await self._named_resource(request.headers), missing[0]
        ).encode()
        return Refusal(403, UNAUTHORIZED, "Forbidden: insufficient scope", headers=((b"www-authenticate", challenge),))

    async def take_a_call_slot(self, request: GuardedRequest) -> Refusal | None:
        """A door that waits or reaches the network takes one of the principal's slots first (kept on the
        request): 429 with Retry-After at the tier's cap, 503 when the slots cannot be read (fail closed)."""
        slots, principal, door = self.call_slots, request.principal, request.door
        if slots is None or principal is None or door is None or not door.slot:
            return None
        try:
            with span("guard call_slot"):
                request.lease = await anyio.to_thread.run_sync(slots.take, principal)
        except RateLimitUnavailable as error:
            logger.error("calls-in-flight slots unavailable", extra={"error_type": str(error)})
            return Unavailable.of("calls_in_flight")
        if request.lease is not None:
            return None
        limit = slots.limit(principal)
        count_limit_refusal("calls_in_flight", principal.tier, principal.user_id)
        return OverLimit.of("calls_in_flight", principal.tier, limit, SLOT_RETRY_AFTER_SECONDS, UNTIL_A_CALL_ENDS)

    async def serve_in_a_call_slot(self, request: GuardedRequest, scope: Scope) -> None:
        """Serve the request; the slot it took (if any) is given back when it ends, even for a client that hung
        up."""
        lease, slots = request.lease, self.call_slots
        try:
            await self._serve(scope, request.receive, request.send)
        finally:
            if lease is not None and slots is not None:
                with anyio.CancelScope(shield=True):
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
    """One response of the SDK app on its way out: an event stream made proxy-safe
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
        headers = list(message.get("headers", []))  # a session id is the endpoint's own (mcp/sessions.py)
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


def _preflight(origin: str, requested: str) -> Answer:
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
    return Answer(204, headers=tuple(headers))


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


def request_headers(scope: Scope) -> dict[str, str]:
    """The request's headers by lower-cased name (the last of a repeated one), decoded once per request: the
    telemetry around the guard and the guard read the same dict (never changed), kept in the request's context
    with the scope it was decoded from."""
    decoded = _HEADERS.get()
    if decoded is not None and decoded[0] is scope:
        return decoded[1]
    headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
    _HEADERS.set((scope, headers))
    return headers


def _header(headers: list[tuple[bytes, bytes]], name: bytes) -> bytes:
    return next((v.lower() for k, v in headers if k.lower() == name), b"")


async def render(send: Send, answer: Answer | Refusal) -> None:
    """The one place a step's answer is sent: a refusal as its JSON-RPC error (with Retry-After when it has one),
    an answer as JSON or plain text (a preflight's 204 with no body)."""
    if isinstance(answer, Refusal):
        headers = list(answer.headers)
        if answer.retry_after is not None:
            headers.append((b"retry-after", str(answer.retry_after).encode()))
        await _json(send, answer.status, answer.payload(), headers)
    elif answer.payload is not None:
        await _json(send, answer.status, answer.payload, list(answer.headers))
    elif answer.status == 204:
        await send({"type": "http.response.start", "status": 204, "headers": list(answer.headers)})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
    elif answer.status:
        await _plain(send, answer.status, answer.body, list(answer.headers))


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
