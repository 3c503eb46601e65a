"""The MCP prompts, served from the prompt table (mcp_backend.tools.prompts): the SDK's low-level server calls
`list_prompts` and `get_prompt`, and `complete` answers completion/complete for prompt arguments and resource
template variables.

A prompt's arguments are validated against its model before it renders: an unknown prompt, a missing or invalid
argument, or one naming something the caller cannot use is -32602 with a message naming the argument, never its
value. Only prompts whose services this function has are served (fail closed).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping

from mcp.shared.exceptions import MCPError
from mcp_types import (
    INVALID_PARAMS,
    CompleteRequestParams,
    CompleteResult,
    Completion,
    EmbeddedResource,
    GetPromptRequestParams,
    GetPromptResult,
    ImageContent,
    ListPromptsResult,
    PaginatedRequestParams,
    PromptArgument,
    PromptMessage,
    PromptReference,
    ResourceLink,
    TextContent,
    TextResourceContents,
)
from mcp_types import Prompt as McpPrompt

from mcp_backend.mcp.icons import PROMPT_ICONS, RESOURCE_ICONS
from mcp_backend.mcp.resources import (
    ResourceBindings,
    ServerContext,
    completion_values,
    context_for,
    links_supported,
)
from mcp_backend.mcp.worker_threads import run_in_worker_thread
from mcp_backend.tools.context import InvalidArguments, parse_arguments
from mcp_backend.tools.prompts import Prompt, PromptArgumentsRefused, PromptLine
from mcp_backend.tools.services import ToolServices

# The spec's maximum number of values in one completion answer.
MAX_COMPLETION_VALUES = 100
PROMPTS_TTL_MS = 3_600_000


def prompt_arguments(prompt: Prompt) -> list[PromptArgument]:
    """A prompt's published arguments, from its model: name, description and whether it is required."""
    return [
        PromptArgument(name=name, description=field.description, required=field.is_required())
        for name, field in prompt.arguments_model.model_fields.items()
    ]


def message(line: PromptLine, links: bool) -> PromptMessage:
    """A prompt line as a user message: an image, an embedded resource, a link as `resource_link` content (or as
    text for a client older than resource links), or text."""
    if line.image is not None:
        data = base64.b64encode(line.image).decode("ascii")
        return PromptMessage(role="user", content=ImageContent(type="image", data=data, mime_type=line.mime_type))
    if line.embed and line.link_uri is not None:
        contents = TextResourceContents(uri=line.link_uri, mime_type=line.mime_type, text=line.text)
        return PromptMessage(role="user", content=EmbeddedResource(type="resource", resource=contents))
    if line.link_uri is None:
        return PromptMessage(role="user", content=TextContent(type="text", text=line.text))
    if not links:
        return PromptMessage(role="user", content=TextContent(type="text", text=f"{line.text}: {line.link_uri}"))
    link = ResourceLink(uri=line.link_uri, name=line.text, mime_type=line.mime_type, icons=RESOURCE_ICONS)
    return PromptMessage(role="user", content=link)


class PromptBindings:
    """The MCP surface of a prompt table, limited to the prompts this function can serve, and completion."""

    def __init__(self, table: Mapping[str, Prompt], services: ToolServices, resources: ResourceBindings) -> None:
        self.services = services
        self.resources = resources
        available = services.available()
        self.prompts = {name: prompt for name, prompt in table.items() if prompt.services <= available}
        self._listed: ListPromptsResult | None = None

    async def list_prompts(self, ctx: ServerContext, params: PaginatedRequestParams | None) -> ListPromptsResult:
        if self._listed is None:
            self._listed = ListPromptsResult(
                prompts=[
                    McpPrompt(
                        name=prompt.name,
                        title=prompt.title,
                        description=prompt.description,
                        arguments=prompt_arguments(prompt),
                        icons=PROMPT_ICONS,
                    )
                    for prompt in self.prompts.values()
                ],
                ttl_ms=PROMPTS_TTL_MS,
                cache_scope="public",
            )
        return self._listed

    async def get_prompt(self, ctx: ServerContext, params: GetPromptRequestParams) -> GetPromptResult:
        prompt = self.prompts.get(params.name)
        if prompt is None:
            raise MCPError(INVALID_PARAMS, "Unknown prompt", data={"name": params.name})
        try:
            arguments = parse_arguments(prompt.arguments_model, params.arguments or {})
        except InvalidArguments as invalid:
            raise MCPError(INVALID_PARAMS, f"{prompt.name}: {invalid}") from None
        context = context_for(self.services, prompt, ctx)
        try:
            lines = await run_in_worker_thread(prompt.render, arguments, context)
        except PromptArgumentsRefused as refused:
            raise MCPError(INVALID_PARAMS, f"{prompt.name}: {refused}") from None
        links = links_supported(ctx)
        return GetPromptResult(description=prompt.description, messages=[message(line, links) for line in lines])

    async def complete(self, ctx: ServerContext, params: CompleteRequestParams) -> CompleteResult:
        """Values for a prompt's argument or a resource template's variable that start with what the caller
        typed; an argument with nothing to offer gets no values (the spec's answer, not an error)."""
        prefix = params.argument.value
        values: list[str] | None = None
        if isinstance(params.ref, PromptReference):
            prompt = self.prompts.get(params.ref.name)
            if prompt is None:
                raise MCPError(INVALID_PARAMS, "Unknown prompt", data={"name": params.ref.name})
            values = await completion_values(
                self.services, prompt, prompt.completions, params.argument.name, prefix, ctx
            )
        else:
            values = await self.resources.complete(ctx, params.ref.uri, params.argument.name, prefix)
        found = values or []
        return CompleteResult(
            completion=Completion(
                values=found[:MAX_COMPLETION_VALUES], total=len(found), has_more=len(found) > MAX_COMPLETION_VALUES
            )
        )
