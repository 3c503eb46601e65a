"""register_endpoint, list_endpoints and endpoint_status: the caller's probed MCP endpoints."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from mcp_backend.netsafety import check_endpoint_url
from mcp_backend.probes.endpoint_tokens import MAX_TOKEN_BYTES
from mcp_backend.quotas import EndpointQuota
from mcp_backend.tools.context import StrictInput, ToolContext, ToolOutput
from mcp_backend.tools.errors import EndpointNotFound, EndpointTokensUnavailable


class RegisterEndpointInput(StrictInput):
    url: str = Field(min_length=1, max_length=2048, description="The endpoint's MCP URL (https).")
    name: str = Field(min_length=1, max_length=128, description="A label for the endpoint.")
    # RFC 6750's b64token: ASCII, so 4,096 characters are 4,096 bytes, what one KMS Encrypt call takes.
    auth: str | None = Field(
        None,
        min_length=1,
        max_length=MAX_TOKEN_BYTES,
        pattern=r"^[A-Za-z0-9\-._~+/]+=*$",
        description=(
            "Optional bearer token the probe sends. Encrypted with a KMS key before it is stored (only the "
            "probe can decrypt it); never shown again."
        ),
    )


class ListEndpointsInput(StrictInput):
    pass


class EndpointStatusInput(StrictInput):
    server_id: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._:-]+$")


class UnregisterEndpointInput(StrictInput):
    server_id: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._:-]+$")


class RegisteredEndpoint(ToolOutput):
    """register_endpoint: the endpoint as registered (the token is never shown, only whether there is one)."""

    serverId: str
    name: str
    url: str
    hasAuth: bool


class UnregisteredEndpoint(ToolOutput):
    serverId: str
    unregistered: bool


class ListedEndpoint(ToolOutput):
    serverId: str
    name: str
    url: str


class EndpointList(ToolOutput):
    endpoints: list[ListedEndpoint]


class ProbeView(ToolOutput):
    status: str
    probedAt: str
    latencyMs: int | None = None
    toolCount: int | None = None
    schemaHash: str | None = None


class Uptime(ToolOutput):
    windowSeconds: int
    probes: int
    up: int
    ratio: float | None = Field(description="up / probes over the window; null without probes")


class SchemaChange(ToolOutput):
    at: str
    schemaHash: str | None
    previousSchemaHash: str | None


class EndpointStatus(ToolOutput):
    """endpoint_status: the latest probe, uptime over the window and the last change of the tool schema."""

    serverId: str
    name: str
    url: str
    hasAuth: bool
    latest: ProbeView | None
    uptime: Uptime
    lastSchemaChange: SchemaChange | None
    probesStoppedAt: str | None = Field(None, description="When probes stopped (failing too long)")


def register_endpoint(request: RegisterEndpointInput, ctx: ToolContext) -> dict[str, Any]:
    url = check_endpoint_url(request.url, allow_loopback_hosts=ctx.allow_loopback_endpoints)
    registry = ctx.endpoint_registry()
    if request.auth and not registry.seals_tokens:  # never stored in plaintext
        raise EndpointTokensUnavailable("this deployment cannot store endpoint tokens (no token key configured)")
    quota = EndpointQuota(ctx.tier, ctx.limits.endpoints)
    return registry.register(ctx.user_id, url, request.name, request.auth, quota)


def unregister_endpoint(request: UnregisterEndpointInput, ctx: ToolContext) -> dict[str, Any]:
    if not ctx.endpoint_registry().unregister(ctx.user_id, request.server_id):
        raise EndpointNotFound(f"no endpoint {request.server_id}")  # someone else's is indistinguishable from none
    return {"serverId": request.server_id, "unregistered": True}


def list_endpoints(request: ListEndpointsInput, ctx: ToolContext) -> dict[str, Any]:
    return {"endpoints": ctx.endpoint_registry().list_for(ctx.user_id)}


def endpoint_status(request: EndpointStatusInput, ctx: ToolContext) -> dict[str, Any]:
    status = ctx.endpoint_registry().status(ctx.user_id, request.server_id, ctx.uptime_window_seconds)
    if status is None:  # someone else's endpoint is indistinguishable from none
        raise EndpointNotFound(f"no endpoint {request.server_id}")
    return status
