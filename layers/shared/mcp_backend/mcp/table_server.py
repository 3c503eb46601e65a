"""The SDK's low-level `Server` for a tool set fixed when the app is built: the tool table answers tools/list
and tools/call through the server's `on_list_tools` / `on_call_tool` handlers, extensions (MCP Tasks) are
bound through the SDK's `Extension` contract, and middleware runs through `Server.middleware`.

The low-level server, not `MCPServer`: a table-driven server needs none of MCPServer's function introspection
(a signature per tool turned into a schema and an argument model); the table has the models.
The server has no prompts and no resources: it lists none, and a prompts/get or resources/read of any name is
invalid params, as MCPServer answers for a name it does not have.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mcp.server.context import HandlerResult, ServerMiddleware
from mcp.server.extension import Extension, MethodBinding, compose_tool_call_handler
from mcp.server.lowlevel import Server
from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    CallToolRequestParams,
    GetPromptRequestParams,
    GetPromptResult,
    ListPromptsResult,
    ListResourcesResult,
    ListResourceTemplatesResult,
    PaginatedRequestParams,
    ReadResourceRequestParams,
    ReadResourceResult,
)

from mcp_backend.mcp.bindings import ServerContext, ToolBindings


def table_server(
    name: str,
    instructions: str,
    bindings: ToolBindings,
    extensions: Sequence[Extension] = (),
    middleware: Sequence[ServerMiddleware[Any]] = (),
) -> Server[Any]:
    """A stateless-ready low-level server over `bindings`, with `extensions` applied and `middleware` (outermost
    first) inside the SDK's own (OpenTelemetry, then the request-state boundary, as MCPServer orders them)."""
    server: Server[Any] = Server(
        name,
        instructions=instructions,
        get_tool_input_schema=bindings.input_schema,
        on_list_tools=bindings.list_tools,
        on_call_tool=bindings.call_tool,
        on_list_prompts=_no_prompts,
        on_get_prompt=_unknown_prompt,
        on_list_resources=_no_resources,
        on_list_resource_templates=_no_resource_templates,
        on_read_resource=_unknown_resource,
    )
    # The SDK's documented step for low-level servers: `requestState` sealed under a key held by this process.
    server.middleware.append(RequestStateBoundary(RequestStateSecurity.ephemeral(), default_audience=name))
    server.middleware.extend(middleware)
    for extension in extensions:
        _apply(server, extension)
    if any(type(extension).intercept_tool_call is not Extension.intercept_tool_call for extension in extensions):
        server.add_request_handler(
            "tools/call", CallToolRequestParams, compose_tool_call_handler(extensions, bindings.call_tool)
        )
    return server


def _apply(server: Server[Any], extension: Extension) -> None:
    """An extension's methods (each only in its protocol versions) and its capability advertisement."""
    if extension.tools() or extension.resources():
        raise ValueError(f"{extension.identifier}: extension tools and resources belong in the tool table")
    for method in extension.methods():
        if server.get_request_handler(method.method) is not None:
            raise ValueError(f"{extension.identifier}: {method.method} is already served")
        server.add_request_handler(method.method, method.params_type, _in_versions(method))
    server.extensions[extension.identifier] = extension.settings()


def _in_versions(method: MethodBinding) -> Any:
    if method.protocol_versions is None:
        return method.handler
    versions = method.protocol_versions

    async def gated(ctx: ServerContext, params: Any) -> HandlerResult:
        if ctx.protocol_version not in versions:
            raise MCPError(code=METHOD_NOT_FOUND, message="Method not found", data=method.method)
        return await method.handler(ctx, params)

    return gated


async def _no_prompts(ctx: ServerContext, params: PaginatedRequestParams | None) -> ListPromptsResult:
    return ListPromptsResult(prompts=[])


async def _unknown_prompt(ctx: ServerContext, params: GetPromptRequestParams) -> GetPromptResult:
    raise MCPError(INVALID_PARAMS, "Unknown prompt")


async def _no_resources(ctx: ServerContext, params: PaginatedRequestParams | None) -> ListResourcesResult:
    return ListResourcesResult(resources=[])


async def _no_resource_templates(
    ctx: ServerContext, params: PaginatedRequestParams | None
) -> ListResourceTemplatesResult:
    return ListResourceTemplatesResult(resource_templates=[])


async def _unknown_resource(ctx: ServerContext, params: ReadResourceRequestParams) -> ReadResourceResult:
    raise MCPError(INVALID_PARAMS, "Unknown resource", data={"uri": str(params.uri)})
