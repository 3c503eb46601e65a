"""Dynamic client registration (RFC 7591) limits, checked before the MCP SDK's handler sees the request.

- Size: the body, `client_name`, and the number and length of `redirect_uris` are capped, so a record always
  fits one DynamoDB item (400 KB: https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/ServiceQuotas.html).
  Over a cap: 400 `invalid_client_metadata` naming it.
- Rate: registrations per source and hour, and for the whole server per hour. Over either: 429 with
  Retry-After, nothing registered.

The source is the address Lambda saw: `requestContext.http.sourceIp` of the Function URL event
(https://docs.aws.amazon.com/lambda/latest/dg/urls-invocation.html#urls-payloads), which the Lambda Web Adapter
passes as JSON in the `x-amzn-request-context` header, replacing any the client sent
(https://github.com/awslabs/aws-lambda-web-adapter, README). Never X-Forwarded-For: a client writes what it
likes there. An IPv6 source counts by its /64, the smallest prefix one subscriber is usually given (RFC 6177).
"""

from __future__ import annotations

import ipaddress
from typing import Any

import pydantic_core
from pydantic import BaseModel, IPvAnyAddress, ValidationError
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from mcp_backend.authorization.store import AuthorizationStore
from mcp_backend.config import AuthorizationServerSettings
from mcp_backend.observability import logger

MAX_BODY_BYTES = 16 * 1024
MAX_CLIENT_NAME_CHARACTERS = 200
MAX_REDIRECT_URIS = 10
MAX_REDIRECT_URI_CHARACTERS = 2048
WINDOW_SECONDS = 3600
REQUEST_CONTEXT_HEADER = b"x-amzn-request-context"
# Requests without a readable request context (never on Lambda) share one budget.
UNKNOWN_SOURCE = "unknown"


class _Http(BaseModel):
    sourceIp: IPvAnyAddress


class _RequestContext(BaseModel):
    """Only the part of the Function URL request context read here (the adapter passes all of it)."""

    http: _Http


class RegistrationRefused(Exception):
    """Metadata over a size cap; the message names the cap, never the value."""


def source_of(scope: Scope) -> str:
    """The key the source's registrations are counted under: its IPv4 address, or its IPv6 /64."""
    raw = next((v for k, v in scope.get("headers", []) if k == REQUEST_CONTEXT_HEADER), b"")
    try:
        address = _RequestContext.model_validate_json(raw).http.sourceIp
    except ValidationError:
        return UNKNOWN_SOURCE
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is None:
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) else address)


def check_size(body: bytes) -> None:
    """Raises RegistrationRefused for a body or a field over its cap, or a body that is not a JSON object."""
    if len(body) > MAX_BODY_BYTES:
        raise RegistrationRefused(f"the registration body is over {MAX_BODY_BYTES} bytes")
    try:
        # pydantic's parser, as the SDK's handler: a ValueError for any fault, deep nesting included (json.loads
        # would raise RecursionError).
        metadata = pydantic_core.from_json(body)
    except ValueError:
        raise RegistrationRefused("the registration body is not JSON") from None
    if not isinstance(metadata, dict):
        raise RegistrationRefused("the registration body is not a JSON object")
    name = metadata.get("client_name")
    if isinstance(name, str) and len(name) > MAX_CLIENT_NAME_CHARACTERS:
        raise RegistrationRefused(f"client_name is over {MAX_CLIENT_NAME_CHARACTERS} characters")
    uris = metadata.get("redirect_uris")
    if isinstance(uris, list):
        if len(uris) > MAX_REDIRECT_URIS:
            raise RegistrationRefused(f"redirect_uris lists more than {MAX_REDIRECT_URIS} URIs")
        if any(isinstance(uri, str) and len(uri) > MAX_REDIRECT_URI_CHARACTERS for uri in uris):
            raise RegistrationRefused(f"a redirect URI is over {MAX_REDIRECT_URI_CHARACTERS} characters")


class RegistrationGate:
    """ASGI, in front of the SDK's /register: size caps, then the source's and the server's hourly budgets."""

    def __init__(self, route: Route, settings: AuthorizationServerSettings, store: AuthorizationStore) -> None:
        self.inner = route.app
        self.settings = settings
        self.store = store

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("method") != "POST":
            await self.inner(scope, receive, send)
            return
        try:
            body = await read_capped(scope, receive)
            check_size(body)
        except RegistrationRefused as refused:
            logger.warning("registration refused: metadata over a cap", extra={"reason": str(refused)})
            await refusal(str(refused), 400)(scope, receive, send)
            return
        if not self.within_budgets(scope):
            await refusal("too many registrations; retry later", 429)(scope, receive, send)
            return
        await self.inner(scope, replay(body, receive), send)

    def within_budgets(self, scope: Scope) -> bool:
        """Counts this registration for its source, then for the server: False (and logged) over either."""
        source = f"register#{source_of(scope)}"
        if not self.store.count(source, WINDOW_SECONDS, self.settings.registrations_per_hour):
            logger.warning("registration refused: rate limit", extra={"limit": "source"})
            return False
        if not self.store.count("register-total", WINDOW_SECONDS, self.settings.registrations_per_hour_total):
            logger.warning("registration refused: rate limit", extra={"limit": "server"})
            return False
        return True


async def read_capped(scope: Scope, receive: Receive) -> bytes:
    """The request body, read no further than one byte past the cap (a declared length over it is not read)."""
    declared = next((v for k, v in scope.get("headers", []) if k == b"content-length"), b"")
    if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise RegistrationRefused(f"the registration body is over {MAX_BODY_BYTES} bytes")
    body = await read_body(receive, MAX_BODY_BYTES)
    if body is None:
        raise RegistrationRefused(f"the registration body is over {MAX_BODY_BYTES} bytes")
    return body


async def read_body(receive: Receive, limit: int) -> bytes | None:
    """A request's body, or None once it is past `limit` bytes (read no further)."""
    body, more = b"", True
    while more:
        message = await receive()
        body += message.get("body", b"")
        more = message.get("more_body", False)
        if len(body) > limit:
            return None
    return body


def replay(body: bytes, receive: Receive) -> Receive:
    """A receive that hands the already-read body over once, then the connection's own messages."""
    sent = False

    async def again() -> Any:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return again


def refusal(description: str, status: int) -> JSONResponse:
    headers = {"Cache-Control": "no-store", **({"Retry-After": str(WINDOW_SECONDS)} if status == 429 else {})}
    return JSONResponse(
        {"error": "invalid_client_metadata", "error_description": description}, status_code=status, headers=headers
    )
