"""The MCP resources, served from the resource table (mcp_backend.tools.resources): the SDK's low-level server
calls `list_resources`, `list_templates` and `read_resource` (its `on_list_resources`,
`on_list_resource_templates` and `on_read_resource` handlers), and tool results get links to results
(`result_links`).

Only kinds whose services this function has are served (fail closed): a URI of any other kind, or one no kind
matches, or a resource of another caller, is the same "Resource not found" (no answer tells one from another):
-32002 in the 2025 era (its spec's server/resources "Error Handling"), -32602 from 2026-07-28 (SEP-2164
retired -32002 for Invalid params).
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from mcp.server.context import ServerRequestContext
from mcp.server.extension import Extension
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    BlobResourceContents,
    ListResourcesResult,
    ListResourceTemplatesResult,
    PaginatedRequestParams,
    ReadResourceRequestParams,
    ReadResourceResult,
    Resource,
    ResourceLink,
    ResourceTemplate,
    TextResourceContents,
)
from mcp_types.version import is_version_at_least

from mcp_backend.api_keys import Principal
from mcp_backend.jobs.errors import InvalidCursor
from mcp_backend.mcp.auth import current_caller
from mcp_backend.mcp.icons import RESOURCE_ICONS
from mcp_backend.mcp.sdk_internals import UriTemplate
from mcp_backend.mcp.worker_threads import run_in_worker_thread
from mcp_backend.tools import app_views
from mcp_backend.tools.context import InvalidArguments, ToolContext, parse_arguments
from mcp_backend.tools.resources import (
    JSON,
    ResourceBytes,
    ResourceKind,
    ResourceNotFound,
    ResourceText,
    result_uri,
)
from mcp_backend.tools.services import ToolServices

ServerContext = ServerRequestContext[Any, Any]
# The 2025 era's code for a resource that does not exist; from 2026-07-28 it is Invalid params (SEP-2164).
RESOURCE_NOT_FOUND = -32002
NOT_FOUND_AS_INVALID_PARAMS_SINCE = "2026-07-28"
# `resource_link` content exists from this protocol version on
# (https://modelcontextprotocol.io/specification/2025-06-18/server/tools#resource-links); an earlier client is
# given the URI in text instead.
RESOURCE_LINKS_SINCE = "2025-06-18"
LIST_PAGE_SIZE = 50
# The listing of templates is the same for every caller and changes only with a deployment.
TEMPLATES_TTL_MS = 3_600_000


def caller() -> Principal:
    """The authenticated caller (the HTTP guard authenticates every request; none here is a wiring bug)."""
    principal = current_caller()
    if principal is None:
        raise MCPError(INVALID_REQUEST, "Unauthorized")
    return principal


def context_for(services: ToolServices, declared: Any, ctx: ServerContext) -> ToolContext:
    principal = caller()
    return services.context_for(declared, principal.user_id, tier=principal.tier)


def links_supported(ctx: ServerContext) -> bool:
    return is_version_at_least(ctx.protocol_version, RESOURCE_LINKS_SINCE)


def not_found(ctx: ServerContext, uri: str) -> MCPError:
    code = RESOURCE_NOT_FOUND
    if is_version_at_least(ctx.protocol_version, NOT_FOUND_AS_INVALID_PARAMS_SINCE):
        code = INVALID_PARAMS
    return MCPError(code, "Resource not found", data={"uri": uri})


def resource_contents(uri: str, read: ResourceText | ResourceBytes) -> TextResourceContents | BlobResourceContents:
    """One read as MCP resource contents: text, or bytes as base64 `blob`."""
    if isinstance(read, ResourceBytes):
        blob = base64.b64encode(read.data).decode("ascii")
        return BlobResourceContents(uri=uri, mime_type=read.mime_type, blob=blob, meta=read.meta)
    return TextResourceContents(uri=uri, mime_type=read.mime_type, text=read.text, meta=read.meta)


class AppsExtension(Extension):
    """MCP Apps advertised the SDK's way: an `Extension` the low-level server lists under
    `capabilities.extensions`, with no settings. Its views are kinds of the resource table, so it contributes no
    tools or resources. Not the SDK's `mcp.server.apps.Apps`: that module imports MCPServer, which the endpoint's
    cold start never loads."""

    identifier = app_views.EXTENSION_ID


@dataclass(frozen=True)
class ServedKind:
    kind: ResourceKind
    template: UriTemplate

    @classmethod
    def of(cls, kind: ResourceKind) -> ServedKind:
        """The kind with its template parsed by the SDK's RFC 6570 matcher; a template whose variables are not
        its model's fields is refused when the table loads (a read would never see the missing one)."""
        template = UriTemplate.parse(kind.uri_template)
        names, fields = sorted(template.variable_names), sorted(kind.variables.model_fields)
        if names != fields:
            raise ValueError(f"{kind.name}: the URI template's variables {names} are not its model's {fields}")
        return cls(kind, template)


async def completion_values(
    services: ToolServices,
    declared: Any,
    completions: Mapping[str, Callable[[str, ToolContext], list[str]]],
    argument: str,
    prefix: str,
    ctx: ServerContext,
) -> list[str] | None:
    """The caller's values of `argument` that start with `prefix`, from a resource kind's or a prompt's
    (`declared`) completions, or None when it completes none."""
    complete = completions.get(argument)
    if complete is None:
        return None
    values: list[str] = await run_in_worker_thread(complete, prefix, context_for(services, declared, ctx))
    return values


class ResourceBindings:
    """The MCP surface of a resource table, limited to the kinds this function can serve."""

    def __init__(self, table: Mapping[str, ResourceKind], services: ToolServices) -> None:
        self.services = services
        available = services.available()
        self.kinds = [ServedKind.of(kind) for kind in table.values() if kind.services <= available]
        listing = [served.kind for served in self.kinds if served.kind.list_page is not None]
        if len(listing) > 1:  # one cursor pages one listing
            raise ValueError("at most one resource kind lists its resources")
        self.listing = listing[0] if listing else None
        self.by_template = {served.kind.uri_template: served.kind for served in self.kinds}

    def extensions(self) -> list[Extension]:
        """MCP Apps when a `ui://` view is served: a host that renders views learns it from the capabilities."""
        serves_views = any(served.kind.mime_type == app_views.APP_MIME_TYPE for served in self.kinds)
        return [AppsExtension()] if serves_views else []

    # -- the SDK's handlers ------------------------------------------------------------
    async def list_resources(self, ctx: ServerContext, params: PaginatedRequestParams | None) -> ListResourcesResult:
        """The caller's resources of the listing kind (their jobs), newest first, LIST_PAGE_SIZE a page."""
        kind = self.listing
        if kind is None or kind.list_page is None:
            return ListResourcesResult(resources=[])
        context = context_for(self.services, kind, ctx)
        cursor = params.cursor if params is not None else None
        try:
            page = await run_in_worker_thread(kind.list_page, context, LIST_PAGE_SIZE, cursor)
        except InvalidCursor:
            raise MCPError(INVALID_PARAMS, "Invalid cursor: pass back a nextCursor this server gave") from None
        resources = [
            Resource(
                uri=entry.uri,
                name=entry.name,
                title=entry.title,
                mime_type=entry.mime_type,
                description=kind.description,
                icons=RESOURCE_ICONS,
            )
            for entry in page.resources
        ]
        return ListResourcesResult(resources=resources, next_cursor=page.next_cursor)

    async def list_templates(
        self, ctx: ServerContext, params: PaginatedRequestParams | None
    ) -> ListResourceTemplatesResult:
        return ListResourceTemplatesResult(
            resource_templates=[
                ResourceTemplate(
                    uri_template=served.kind.uri_template,
                    name=served.kind.name,
                    title=served.kind.title,
                    description=served.kind.description,
                    mime_type=served.kind.mime_type,
                    icons=RESOURCE_ICONS,
                )
                for served in self.kinds
            ],
            ttl_ms=TEMPLATES_TTL_MS,
            cache_scope="public",
        )

    async def read_resource(self, ctx: ServerContext, params: ReadResourceRequestParams) -> ReadResourceResult:
        uri = str(params.uri)
        for served in self.kinds:
            matched = served.template.match(uri)
            if matched is None:
                continue
            try:
                variables = parse_arguments(served.kind.variables, matched)
            except InvalidArguments:
                break
            context = context_for(self.services, served.kind, ctx)
            try:
                read = await run_in_worker_thread(served.kind.read, variables, context)
            except ResourceNotFound:
                break
            return ReadResourceResult(contents=[resource_contents(uri, read)])
        raise not_found(ctx, uri)

    # -- completion of a template's variables ----------------------------------------
    async def complete(self, ctx: ServerContext, template: str, variable: str, prefix: str) -> list[str] | None:
        """Values of `variable` in `template` for the caller, or None when that template or variable has none."""
        kind = self.by_template.get(template)
        if kind is None:
            return None
        return await completion_values(self.services, kind, kind.completions, variable, prefix, ctx)

    # -- links in tool results -------------------------------------------------------
    def result_links(self, ctx: ServerContext, structured: Mapping[str, Any]) -> list[ResourceLink]:
        """A link to the job's result resource when a tool's answer is a job with a result (get_job): a client
        reads a large result from it, in pages, instead of from the tool's answer. None for a client older than
        resource links."""
        if "job-result" not in {served.kind.name for served in self.kinds} or not links_supported(ctx):
            return []
        job_id = structured.get("jobId")
        if not isinstance(job_id, str) or not ({"result", "resultChunk"} & structured.keys()):
            return []
        size = structured.get("resultChars")
        return [
            ResourceLink(
                uri=result_uri(job_id),
                name=f"{job_id}-result",
                title=f"Result of job {job_id}",
                mime_type=JSON,
                size=size if isinstance(size, int) else None,
                icons=RESOURCE_ICONS,
            )
        ]
