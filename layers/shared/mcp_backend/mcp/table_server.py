"""The SDK's low-level `Server` for a tool set fixed when the app is built: the tool table answers tools/list
and tools/call through the server's `on_list_tools` / `on_call_tool` handlers, extensions (MCP Tasks) are
bound through the SDK's `Extension` contract, and middleware runs through `Server.middleware`.

The low-level server, not `MCPServer`: a table-driven server needs none of MCPServer's function introspection
(a signature per tool turned into a schema and an argument model); the table has the models.
Resources and prompts come from their own tables (mcp_backend.mcp.resources, mcp_backend.mcp.prompts); without
them the server lists none, and a prompts/get or resources/read of any name is invalid params, as MCPServer
answers for a name it does not have.
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
    Icon,
    ListPromptsResult,
    ListResourcesResult,
    ListResourceTemplatesResult,
    PaginatedRequestParams,
    ReadResourceRequestParams,
    ReadResourceResult,
)

from mcp_backend.mcp.bindings import ServerContext, ToolBindings
from mcp_backend.mcp.prompts import PromptBindings
from mcp_backend.mcp.resources import ResourceBindings


def table_server(
    name: str,
    instructions: str,
    bindings: ToolBindings,
    extensions: Sequence[Extension] = (),
    middleware: Sequence[ServerMiddleware[Any]] = (),
    methods: Sequence[MethodBinding] = (),
    *,
    resources: ResourceBindings | None = None,
    prompts: PromptBindings | None = None,
    icons: list[Icon] | None = None,
    request_state: RequestStateSecurity | None = None,
) -> Server[Any]:
    """A stateless-ready low-level server over `bindings`, with `extensions` applied, `methods` served beside
    theirs (a method may be bound once per protocol era) and `middleware` (outermost first) inside the SDK's own
    (OpenTelemetry, then the request-state boundary, as MCPServer orders them). `request_state` seals what a
    multi-round-trip request carries between rounds; without it, a key held by this process alone."""
    server: Server[Any] = Server(
        name,
        instructions=instructions,
        get_tool_input_schema=bindings.input_schema,
        on_list_tools=bindings.list_tools,
        on_call_tool=bindings.call_tool,
        icons=icons,
        on_list_prompts=prompts.list_prompts if prompts else _no_prompts,
        on_get_prompt=prompts.get_prompt if prompts else _unknown_prompt,
        on_completion=prompts.complete if prompts else None,
        on_list_resources=resources.list_resources if resources else _no_resources,
        on_list_resource_templates=resources.list_templates if resources else _no_resource_templates,
        on_read_resource=resources.read_resource if resources else _unknown_resource,
    )
    if resources is not None:
        bindings.result_links = resources.result_links
    # The SDK's documented step for low-level servers. The endpoint passes the key every execution environment
    # shares (mcp_backend.mcp.request_state_key): a retry may land on another one.
    security = request_state or RequestStateSecurity.ephemeral()
    server.middleware.append(RequestStateBoundary(security, default_audience=name))
    server.middleware.extend(middleware)
    bound: dict[str, list[MethodBinding]] = {}
    for extension in extensions:
        _check(extension)
        for method in extension.methods():
            bound.setdefault(method.method, []).append(method)
        server.extensions[extension.identifier] = extension.settings()
    for method in methods:
        bound.setdefault(method.method, []).append(method)
    for name, alternatives in bound.items():
        if server.get_request_handler(name) is not None:
            raise ValueError(f"{name} is already served")
        server.add_request_handler(name, _params_type(name, alternatives), _by_version(alternatives))
    if any(type(extension).intercept_tool_call is not Extension.intercept_tool_call for extension in extensions):
        server.add_request_handler(
            "tools/call", CallToolRequestParams, compose_tool_call_handler(extensions, bindings.call_tool)
        )
    return server


def _check(extension: Extension) -> None:
    if extension.tools() or extension.resources():
        raise ValueError(f"{extension.identifier}: extension tools and resources belong in the tool table")


def _params_type(name: str, alternatives: list[MethodBinding]) -> Any:
    """The one params model the SDK validates a method's params with: every era's binding must share it."""
    types = {method.params_type for method in alternatives}
    if len(types) != 1:
        raise ValueError(f"{name}: every protocol era's binding must take the same params model")
    return types.pop()


def _by_version(alternatives: list[MethodBinding]) -> Any:
    """One handler for a method bound in several eras: the binding of the request's protocol version, each only
    in its versions (else method not found, as for a method not served at all)."""
    if len(alternatives) > 1 and any(method.protocol_versions is None for method in alternatives):
        raise ValueError(f"{alternatives[0].method}: a method bound in every era cannot be bound again")
    if len(alternatives) == 1 and alternatives[0].protocol_versions is None:
        return alternatives[0].handler

    async def gated(ctx: ServerContext, params: Any) -> HandlerResult:
        for method in alternatives:
            if method.protocol_versions is not None and ctx.protocol_version in method.protocol_versions:
                return await method.handler(ctx, params)
        raise MCPError(code=METHOD_NOT_FOUND, message="Method not found", data=alternatives[0].method)

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
