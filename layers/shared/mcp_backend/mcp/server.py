"""The MCP endpoint as one ASGI app: `uvicorn --factory mcp_backend.mcp.server:create_app`.

Layers, outermost first: RequestTelemetry (correlation id, cold start) -> McpHttpGuard (host, origin,
405, auth, 415, event-stream hygiene) -> the SDK's stateless Streamable HTTP app (both protocol eras)
-> SDK middleware StrictArguments, ToolCallTelemetry and ToolListCache -> the tools generated from the tool table.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, GetPromptResult, InputRequiredResult
from mcp_types import Tool as McpTool
from starlette.types import ASGIApp

from mcp_backend.api_keys import SecretReader
from mcp_backend.aws import AwsClients, ClientFactory, LazyClient
from mcp_backend.calllog.writer import CallLogWriter
from mcp_backend.config import McpSettings, load_settings
from mcp_backend.mcp.auth import ApiKeyAuthenticator, Authenticator
from mcp_backend.mcp.bindings import StrictArguments, ToolBindings
from mcp_backend.mcp.guard import HostPolicy, McpHttpGuard
from mcp_backend.mcp.oauth import EitherAuthenticator, OAuthAuthenticator
from mcp_backend.mcp.telemetry import RequestTelemetry, ToolCallTelemetry
from mcp_backend.tools.registry import TOOLS, Tool
from mcp_backend.tools.services import ToolServices

if TYPE_CHECKING:
    from mypy_boto3_kinesis import KinesisClient

SERVER_NAME = "mcp-backend"


class FixedToolsServer(MCPServer):
    """The SDK server for a tool set fixed when the app is built: tools/list answers with the tool
    descriptions built for the first request, instead of re-validating every tool's schema each time."""

    _listed: list[McpTool] | None = None

    async def list_tools(self) -> list[McpTool]:
        if self._listed is None:
            self._listed = await super().list_tools()
        return self._listed

    async def get_prompt(
        self, name: str, arguments: dict[str, Any] | None = None, context: Context[Any, Any] | None = None
    ) -> GetPromptResult | InputRequiredResult:
        # The SDK raises a plain ValueError for an unknown name, which goes out as an internal error (with a
        # logged traceback) or as code 0 with the name echoed; the spec's answer is invalid params.
        if name not in {prompt.name for prompt in await self.list_prompts()}:
            raise MCPError(INVALID_PARAMS, "Unknown prompt")
        return await super().get_prompt(name, arguments, context)


class ToolListCache:
    """SDK ServerMiddleware, innermost: a tools/list answer is the wire form the SDK produced for the first
    request with the same protocol version and params. Shaping it is most of a tools/list's time (the SDK
    validates and dumps every tool's input schema against the version's result surface on each request),
    and with a fixed tool set it never changes. Only answers the SDK returned are kept, so malformed params
    still reach the SDK and get its -32602; distinct params beyond `max_entries` are answered uncached."""

    def __init__(self, max_entries: int = 64) -> None:
        self.max_entries = max_entries
        self._answers: dict[tuple[str, str], dict[str, Any]] = {}

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        if ctx.method != "tools/list":
            return await call_next(ctx)
        try:
            key = (ctx.protocol_version, json.dumps(ctx.params, sort_keys=True))
        except (TypeError, ValueError):
            return await call_next(ctx)
        cached = self._answers.get(key)
        if cached is None:
            result = await call_next(ctx)
            if not isinstance(result, dict) or len(self._answers) >= self.max_entries:
                return result
            self._answers[key] = cached = result
        # The SDK copies the top level of a returned dict; nothing downstream writes into nested values.
        return dict(cached)


def tool_bindings(settings: McpSettings, clients: AwsClients, table: Mapping[str, Tool] = TOOLS) -> ToolBindings:
    """The table's MCP tools, with the services each declares (AWS clients built on first use)."""
    services = ToolServices.from_settings(settings, clients)
    services.require([tool for tool in table.values() if tool.runs_sync], "McpServer")
    return ToolBindings(table, services)


def create_app(
    settings: McpSettings | None = None,
    authenticator: Authenticator | None = None,
    client_factory: ClientFactory | None = None,
) -> ASGIApp:
    """Build the endpoint. Settings default to the environment (the McpServer function's template entry);
    AWS clients are created on first use, from `client_factory` when given, else boto3."""
    from mcp.server import _streamable_http_modern as modern_http
    from mcp.server.transport_security import TransportSecuritySettings

    settings = settings or load_settings(McpSettings)
    clients = AwsClients(client_factory)
    bindings = tool_bindings(settings, clients)
    if authenticator is None:
        reader = SecretReader(
            settings.api_keys_secret_id,
            settings.parameters_secrets_extension_http_port,
            client_factory=lambda: clients("secretsmanager"),
        )
        api_keys = ApiKeyAuthenticator(reader, settings.api_keys_cache_seconds)
        authenticator = api_keys
        if settings.auth_mode != "apikey":
            oauth = OAuthAuthenticator.from_settings(settings)
            authenticator = oauth if settings.auth_mode == "oauth" else EitherAuthenticator(api_keys, oauth)

    # The 2026-07-28 entry defers its response until a notification or this interval; the SDK exposes it
    # only as a module constant, so the configured keepalive is applied there too.
    modern_http._SSE_PING_INTERVAL = settings.sse_keepalive_seconds

    root_handlers = list(logging.root.handlers)
    server = FixedToolsServer(
        SERVER_NAME,
        instructions="Analyse CSV/JSON datasets: synchronously (analyze_dataset) or as queued jobs.",
        tools=bindings.sdk_tools(),
        middleware=[
            StrictArguments(bindings.input_models),
            ToolCallTelemetry(
                CallLogWriter(settings.call_log_stream_name, cast("KinesisClient", LazyClient("kinesis", clients))),
                bindings.input_models,
            ),
            ToolListCache(),
        ],
        log_level="WARNING",
    )
    # MCPServer calls logging.basicConfig; Powertools' JSON logger propagates, so every line would print twice.
    logging.root.handlers[:] = root_handlers
    sdk_app = server.streamable_http_app(
        streamable_http_path=settings.mcp_path,
        stateless_http=True,
        json_response=False,  # SSE, so progress notifications can stream before the result
        # Host and Origin are checked by McpHttpGuard, which also knows the Function URL's wildcard host.
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    guard = McpHttpGuard(
        sdk_app,
        path=settings.mcp_path,
        hosts=HostPolicy.for_region(settings.aws_region, settings.extra_hosts(), settings.allowed_origins()),
        authenticator=authenticator,
        keepalive_seconds=settings.sse_keepalive_seconds,
        resource=settings.oauth_resource,
        tool_access=bindings.access,
    )
    return RequestTelemetry(guard)
