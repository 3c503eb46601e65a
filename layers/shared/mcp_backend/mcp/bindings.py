"""The MCP tools, generated from the tool table (mcp_backend.tools.table): each synchronous tool under
its own name, and for each job-capable tool two that submit it (one job, or up to 100 at once), which the
jobs service enqueues. Only the protocol edge lives here: arguments in, the caller, errors out. The SDK's
low-level server calls `list_tools` and `call_tool` (its `on_list_tools` / `on_call_tool` handlers): the table
is the tool registry, with no function signatures for the SDK to introspect.

Every tool publishes its strict input model as inputSchema (unknown fields rejected), its output model as
outputSchema (structuredContent validates against it), and annotations derived from the table's `access`,
`effect` and `reaches_network`; the listing carries cache hints (docs/mcp-endpoint.md, "Catalog"). StrictArguments
validates `tools/call` arguments against it before the SDK does, naming fields, never values: a tool
execution error (isError) from 2025-11-25 on, a -32602 before (each era's server/tools "Error Handling").
Failures the tools report (a typed error with a safe message) reach the client as "<ErrorType>: <message>";
anything else is the SDK's generic tool error.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal, TypeVar

import anyio.from_thread
import pydantic_core
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INVALID_PARAMS,
    AudioContent,
    CallToolRequestParams,
    CallToolResult,
    ContentBlock,
    EmbeddedResource,
    ImageContent,
    InputRequiredResult,
    ListToolsResult,
    ResourceLink,
    TextContent,
    ToolAnnotations,
    ToolExecution,
)
from mcp_types import Tool as McpTool
from mcp_types.version import is_version_at_least
from pydantic import BaseModel, Field, ValidationError, create_model

from mcp_backend.api_keys import Principal
from mcp_backend.jobs.errors import JobRequestError
from mcp_backend.jobs.service import MAX_BATCH_ITEMS, JobsService
from mcp_backend.mcp.asking import (
    ASKING_SINCE,
    NotConfirmed,
    ask_on_the_open_stream,
    confirmation,
    confirmed_on_the_open_stream,
)
from mcp_backend.mcp.auth import current_caller
from mcp_backend.mcp.icons import TOOL_ICONS
from mcp_backend.mcp.request_state_key import SharedRequestStateKey
from mcp_backend.mcp.worker_threads import run_in_worker_thread
from mcp_backend.netsafety import UnsafeUrl
from mcp_backend.observability import logger
from mcp_backend.quotas import QuotaExceeded
from mcp_backend.tools.context import AskCallback, ProgressCallback, StrictInput
from mcp_backend.tools.errors import ToolError
from mcp_backend.tools.services import ToolServices
from mcp_backend.tools.submissions import JobSubmissions, SubmittedBatch, SubmittedJob, model_name
from mcp_backend.tools.table import Access, Effect, Tool, ToolAnswer
from mcp_backend.validation import describe_validation_error

# Failures whose type and message are written to be shown to the caller.
REPORTED_ERRORS = (ToolError, JobRequestError, UnsafeUrl, QuotaExceeded)
# From this protocol version on, arguments that fail a tool's inputSchema are a tool execution error the model
# can correct itself from (SEP-1303, https://modelcontextprotocol.io/specification/2025-11-25/server/tools#error-handling;
# the same in https://modelcontextprotocol.io/specification/2026-07-28/server/tools#error-handling); before it,
# invalid arguments were a protocol error (https://modelcontextprotocol.io/specification/2025-06-18/server/tools).
INPUT_ERRORS_AS_RESULTS_SINCE = "2025-11-25"
# How long a client may reuse a tools/list answer, and that it is the same for every caller (2026-07-28 `ttlMs`
# and `cacheScope`, SEP-2549). The tool set changes only with a deployment; each re-list is a billed invocation.
LISTING_TTL_MS = 3_600_000
LISTING_CACHE_SCOPE: Literal["public", "private"] = "public"
# The most a tool that answers content blocks may send in one answer: the blocks as JSON (base64 data included).
# The answer is held in memory and sent as one message; a larger result belongs in a resource the answer links to.
MAX_CONTENT_BYTES = 4 * 1024 * 1024
# The blocks a tool may answer, as the SDK's types define them; anything else is refused.
CONTENT_BLOCKS = (TextContent, ImageContent, AudioContent, EmbeddedResource, ResourceLink)
T = TypeVar("T")
ServerContext = ServerRequestContext[Any, Any]


class ToolCallFailed(Exception):
    """A tool's failure whose message ("<ErrorType>: <message>") is written to be shown to the caller."""


class AskUser(Exception):
    """The call cannot finish before its user answers: its answer is this `input_required` result."""

    def __init__(self, result: InputRequiredResult) -> None:
        super().__init__("input required")
        self.result = result


def reported(call: Callable[..., T], *args: Any) -> T:
    """`call(*args)`, a reported failure raised as ToolCallFailed "<ErrorType>: <message>"."""
    try:
        return call(*args)
    except REPORTED_ERRORS as error:
        raise ToolCallFailed(f"{type(error).__name__}: {error}") from None


def tool_result(value: dict[str, Any]) -> CallToolResult:
    """A tool's answer: the object as structuredContent, and as indented JSON text for clients that read only
    content (the form the SDK's MCPServer gives a tool that returns a dict)."""
    text = pydantic_core.to_json(value, fallback=str, indent=2).decode()
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=value)


def linked_result(value: dict[str, Any], links: list[ResourceLink]) -> CallToolResult:
    """A tool's answer that names resources: the links follow the text. A page of a large result is not repeated
    in the text (it is in structuredContent): the text says where the whole result is read."""
    result = tool_result(value)
    if "resultChunk" in value:
        rest = {key: item for key, item in value.items() if key != "resultChunk"}
        text = (
            f"{pydantic_core.to_json(rest, fallback=str).decode()}\nThe result is {value.get('resultChars')} bytes "
            "of JSON text: read it from the linked resource (in pages, _meta.nextUri) or with get_job's nextCursor."
        )
        result.content = [TextContent(type="text", text=text)]
    result.content = [*result.content, *links]
    return result


def content_result(name: str, blocks: list[ContentBlock], limit: int = MAX_CONTENT_BYTES) -> CallToolResult:
    """A content tool's answer: its blocks as sent, when each is one of the SDK's content blocks and all of them
    fit the limit; else ToolCallFailed naming what is wrong (the limit, in bytes)."""
    if not isinstance(blocks, list) or not all(isinstance(block, CONTENT_BLOCKS) for block in blocks):
        logger.error("tool answered something other than content blocks", extra={"tool": name})
        raise ToolCallFailed("InvalidToolAnswer: the tool answered something other than MCP content blocks")
    size = sum(len(block.model_dump_json(by_alias=True, exclude_none=True)) for block in blocks)
    if size > limit:
        raise ToolCallFailed(f"ContentTooLarge: the answer is {size} bytes of content; the limit is {limit} bytes")
    return CallToolResult(content=blocks)


def tool_failure(text: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)


def tool_annotations(name: str, access: Access, effect: Effect, reaches_network: bool) -> ToolAnnotations:
    """What a client may assume about a tool, from what the table declares: only a READ tool is read-only;
    one that replaces, stops or deletes is destructive, and its repeat changes nothing more; one that adds
    is not idempotent; one that fetches from the network (itself or through its job) is open-world."""
    return ToolAnnotations(
        title=name.replace("_", " ").capitalize(),
        read_only_hint=access is Access.READ,
        destructive_hint=effect is Effect.CHANGES,
        idempotent_hint=effect is not Effect.ADDS,
        open_world_hint=reaches_network,
    )


def task_execution(tool: Tool) -> ToolExecution | None:
    """A tool's 2025-11-25 `execution.taskSupport`: "optional" when it runs both now and as a job, "required"
    when only as a job, absent (forbidden) when it never runs as a job. The 2026-07-28 listing has no such
    field (the SDK's sieve drops it there): the Tasks extension is declared per request instead."""
    if not tool.runs_as_job:
        return None
    return ToolExecution(task_support="optional" if tool.runs_sync else "required")


def submit_many_model(tool: Tool, item_model: type[BaseModel]) -> type[BaseModel]:
    """The published schema of a batch: every item is a submission of the tool."""
    return create_model(
        model_name(tool.submit_many_name),
        __base__=StrictInput,
        items=(list[item_model], Field(min_length=1, max_length=MAX_BATCH_ITEMS)),  # type: ignore[valid-type]
    )


def submit_many_envelope(tool: Tool) -> type[BaseModel]:
    """What a batch call must satisfy as a whole: a list of 1 to 100 items. Each item is validated on its own,
    so an invalid item is that item's error entry and the valid ones are submitted."""
    return create_model(
        model_name(tool.submit_many_name) + "Envelope",
        __base__=StrictInput,
        items=(list[Any], Field(min_length=1, max_length=MAX_BATCH_ITEMS)),
    )


@dataclass(frozen=True)
class Binding:
    """One MCP tool: its name, text, strict input model, output model, annotations, and the coroutine that runs
    a call of it."""

    name: str
    description: str
    input_model: type[BaseModel]  # what StrictArguments enforces on the whole call
    call: Callable[[ServerContext, dict[str, Any]], Awaitable[ToolAnswer]]
    access: Access
    output_model: type[BaseModel] | None  # None: it answers content blocks, with no outputSchema
    annotations: ToolAnnotations
    schema_model: type[BaseModel] | None = None  # the published inputSchema, when stricter than input_model
    execution: ToolExecution | None = None  # whether a 2025-11-25 client may call it as a task
    ui_resource_uri: str | None = None  # the MCP Apps view of its result (`_meta.ui.resourceUri`)


class ToolBindings:
    """The MCP surface of a tool table. Tools are looked up by name when called, so the table is the truth."""

    def __init__(
        self,
        table: Mapping[str, Tool],
        services: ToolServices,
        sync_call_deadline_seconds: float | None = None,
        request_state_key: SharedRequestStateKey | None = None,
    ) -> None:
        self.table = table
        self.services = services
        # Seals what a tool that asks its user carries between the rounds; without one no tool can ask.
        self.request_state_key = request_state_key or SharedRequestStateKey(None)
        # Every synchronous call ends by then, as a tool error naming the deadline (None: no deadline).
        self.sync_call_deadline_seconds = sync_call_deadline_seconds
        # Every door that creates a job goes through this one policy (the Tasks extension's too).
        self.submissions = JobSubmissions(table, services)
        self.jobs: JobsService = self.submissions.jobs
        self.bindings: list[Binding] = []
        for tool in self.submissions.tools.values():
            self.bindings.extend(self._submit_bindings(tool))
        self.bindings.extend(self._sync_binding(tool) for tool in table.values() if tool.runs_sync)
        self.input_models = {binding.name: binding.input_model for binding in self.bindings}
        # The scope each tool needs from an OAuth caller (the HTTP guard checks it before the SDK runs).
        self.access = {binding.name: binding.access for binding in self.bindings}
        # Tools whose calls are answered as an event stream: progress flows before the result.
        self.streaming_tools = frozenset(
            tool.name for tool in table.values() if tool.runs_sync and tool.streams_progress
        )
        # Tools whose synchronous calls fetch from the network: each call holds one of the caller's slots.
        self.network_tools = frozenset(tool.name for tool in table.values() if tool.runs_sync and tool.reaches_network)
        # Tools whose calls may ask their user: a 2025-era call of one asks on its open event stream.
        self.asking_tools = frozenset(
            [tool.name for tool in table.values() if tool.runs_sync and tool.asks]
            + [tool.submit_name for tool in self.submissions.tools.values() if tool.confirm is not None]
        )

        # Links to the resources a tool's answer names (a job's result); none until the resource table is bound.
        self.result_links: Callable[[ServerContext, dict[str, Any]], list[ResourceLink]] = lambda ctx, value: []

        self._by_name = {binding.name: binding for binding in self.bindings}
        self._schemas: dict[str, dict[str, Any]] | None = None
        self._listed: ListToolsResult | None = None

    # -- the SDK's tools/list and tools/call handlers -------------------------------
    async def list_tools(self, ctx: ServerContext, params: Any) -> ListToolsResult:
        """Every tool with the strict model's schema (additionalProperties: false), the one StrictArguments
        enforces (a batch publishes its items' schema too; they are validated one by one), its output model's
        schema and its annotations. Built at the first listing, not with the app: the schemas are no part of a
        cold start."""
        if self._listed is None:
            schemas = self.input_schemas()
            self._listed = ListToolsResult(
                tools=[
                    McpTool(
                        name=binding.name,
                        description=binding.description,
                        input_schema=schemas[binding.name],
                        output_schema=binding.output_model.model_json_schema() if binding.output_model else None,
                        annotations=binding.annotations,
                        execution=binding.execution,
                        icons=TOOL_ICONS,
                        meta={"ui": {"resourceUri": binding.ui_resource_uri}} if binding.ui_resource_uri else None,
                    )
                    for binding in self.bindings
                ],
                ttl_ms=LISTING_TTL_MS,
                cache_scope=LISTING_CACHE_SCOPE,
            )
        return self._listed

    def input_schemas(self) -> dict[str, dict[str, Any]]:
        """Each tool's published inputSchema, built once, when first needed."""
        if self._schemas is None:
            self._schemas = {
                binding.name: (binding.schema_model or binding.input_model).model_json_schema()
                for binding in self.bindings
            }
        return self._schemas

    def input_schema(self, name: str) -> dict[str, Any] | None:
        """The SDK's `get_tool_input_schema`, for its Mcp-Param header check of a tools/call."""
        return self.input_schemas().get(name)

    async def call_tool(
        self, ctx: ServerContext, params: CallToolRequestParams
    ) -> CallToolResult | InputRequiredResult:
        """Run one call (its arguments already checked by StrictArguments). A failure the tool reports is a
        tool execution error with its message; anything else is logged and answered without its text. A call
        that must ask its user first answers `input_required` (mcp_backend.mcp.asking)."""
        binding = self._by_name.get(params.name)
        if binding is None:
            return tool_failure(f"Unknown tool: {params.name}")
        try:
            value = await binding.call(ctx, dict(params.arguments or {}))
            if not isinstance(value, dict):
                return content_result(binding.name, value)
            links = self.result_links(ctx, value)
            return linked_result(value, links) if links else tool_result(value)
        except MCPError:
            raise
        except AskUser as asking:
            return asking.result
        except ToolCallFailed as failed:
            return tool_failure(f"Error executing tool {binding.name}: {failed}")
        except Exception:  # noqa: BLE001 - any crash is logged and answered as a tool error without its text
            logger.exception("tool raised an unexpected exception", extra={"tool": binding.name})
            return tool_failure(f"Error executing tool {binding.name}")

    # -- generated tools -----------------------------------------------------------
    def _sync_binding(self, tool: Tool) -> Binding:
        name, streams_progress = tool.name, tool.streams_progress

        async def call(ctx: ServerContext, arguments: dict[str, Any]) -> ToolAnswer:
            principal = _caller(ctx)
            progress: ProgressCallback | None = None
            if streams_progress:
                # The first event goes out before the work (a download, say) starts.
                await ctx.session.report_progress(0.0, 1.0, "started")
            if streams_progress or _wants_progress(ctx):
                # Any synchronous tool may report progress when its caller asked for it (a progressToken): the
                # call is then answered as an event stream (mcp_backend.mcp.response_modes).
                report = ctx.session.report_progress

                def progress(fraction: float, message: str) -> None:
                    anyio.from_thread.run(report, min(max(fraction, 0.0), 1.0), 1.0, message)

            current = self.table[name]
            context = self.services.context_for(
                current, principal.user_id, progress, principal.tier, deadline_seconds=self.sync_call_deadline_seconds
            )
            if current.asks:
                context = replace(context, ask=_asker(ctx))
            result = await run_in_worker_thread(reported, current.answer, arguments, context)
            if streams_progress:
                await ctx.session.report_progress(1.0, 1.0, "done")
            return result

        suffix = " Runs now and streams progress notifications." if streams_progress else ""
        return Binding(
            name,
            tool.description + suffix,
            tool.input_model,
            call,
            tool.access,
            tool.output_model,
            tool_annotations(name, tool.access, tool.effect, tool.reaches_network),
            execution=task_execution(tool),
            ui_resource_uri=tool.ui_resource_uri,
        )

    def _submit_bindings(self, tool: Tool) -> list[Binding]:
        name, one, many = tool.name, self.submissions.models[tool.name], submit_many_envelope(tool)

        async def submit(ctx: ServerContext, arguments: dict[str, Any]) -> dict[str, Any]:
            caller = _caller(ctx)
            await self._confirmed(ctx, self.submissions.tools[name], one, arguments)
            return await run_in_worker_thread(reported, self.submissions.submit, caller, name, arguments)

        async def submit_many(ctx: ServerContext, arguments: dict[str, Any]) -> dict[str, Any]:
            items = many.model_validate(arguments).items  # type: ignore[attr-defined]
            caller = _caller(ctx)
            results = await run_in_worker_thread(reported, self.submissions.submit_many, caller, name, items)
            return {"results": results}

        article = "an" if tool.name[:1] in "aeiou" else "a"
        # Each call without a callId queues another job, which fetches from the network when the tool does.
        effects = (Access.SUBMIT, Effect.ADDS, tool.reaches_network)
        return [
            Binding(
                tool.submit_name,
                f"Queue {article} {tool.name} job; returns {{jobId, status}}. Pass callId to make it idempotent.",
                one,
                submit,
                Access.SUBMIT,
                SubmittedJob,
                tool_annotations(tool.submit_name, *effects),
            ),
            Binding(
                tool.submit_many_name,
                f"Queue many {tool.name} jobs at once; returns one jobId or error per item, in order "
                "(an invalid item is its own error; the others are queued).",
                many,
                submit_many,
                Access.SUBMIT,
                SubmittedBatch,
                tool_annotations(tool.submit_many_name, *effects),
                schema_model=submit_many_model(tool, one),
            ),
        ]

    async def _confirmed(
        self, ctx: ServerContext, tool: Tool, model: type[BaseModel], arguments: dict[str, Any]
    ) -> None:
        """Returns once the call may go on: nothing to confirm, or its user confirmed. Else AskUser (the question
        still to ask), ToolCallFailed (declined, or the endpoint cannot ask) or MCPError (a malformed answer)."""
        if tool.confirm is None:
            return
        try:
            question = tool.confirm(model.model_validate(arguments))
        except ValidationError:  # the submission itself reports what is wrong
            return
        if question is None:
            return
        if not is_version_at_least(ctx.protocol_version, ASKING_SINCE):
            try:
                await confirmed_on_the_open_stream(ctx, question)
            except NotConfirmed as refused:
                raise ToolCallFailed(f"NotConfirmed: {refused}") from None
            return
        try:
            # In a worker thread: the first ask of an environment reads the shared key (a network call).
            asked = await run_in_worker_thread(
                confirmation, ctx.params, ctx.protocol_version, question, self.request_state_key
            )
        except NotConfirmed as refused:
            raise ToolCallFailed(f"NotConfirmed: {refused}") from None
        if asked is not None:
            raise AskUser(asked)


class StrictArguments:
    """SDK ServerMiddleware: `tools/call` params must name a tool with a string and carry an object of arguments
    (else the request is malformed: -32602 in every era), and the arguments must satisfy the tool's model (else,
    naming the fields, a tool execution error from 2025-11-25 on, -32602 before). A `tools/call` notification
    (no id) calls nothing and answers nobody: it is dropped here with a DEBUG line, before telemetry counts it
    or a failure is logged."""

    def __init__(self, input_models: Mapping[str, type[BaseModel]]) -> None:
        self.input_models = input_models

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        if ctx.method != "tools/call":
            return await call_next(ctx)
        if ctx.request_id is None:
            logger.debug("dropped a tools/call notification: it has no id to answer")
            return None
        params = ctx.params if isinstance(ctx.params, Mapping) else {}
        name = params.get("name")
        if not isinstance(name, str):
            raise MCPError(INVALID_PARAMS, "tools/call: params.name must be a string naming a tool")
        model = self.input_models.get(name)
        arguments = params.get("arguments", {})
        if arguments is None:  # absent and null are an empty argument object; [] or "" are not objects
            arguments = {}
        if model is not None:
            if not isinstance(arguments, Mapping):
                raise MCPError(INVALID_PARAMS, f"{name}: params.arguments must be an object")
            try:
                model.model_validate(arguments)
            except ValidationError as error:
                message = f"{name}: {describe_validation_error(error)}"
                if is_version_at_least(ctx.protocol_version, INPUT_ERRORS_AS_RESULTS_SINCE):
                    return CallToolResult(content=[TextContent(type="text", text=message)], is_error=True)
                raise MCPError(INVALID_PARAMS, message) from None
        return await call_next(ctx)


def _asker(ctx: ServerContext) -> AskCallback:
    """A tool's `ctx.ask` from its worker thread: the question goes out on the event loop, on this call's stream."""

    def ask(message: str, schema: dict[str, Any]) -> dict[str, Any]:
        result = anyio.from_thread.run(ask_on_the_open_stream, ctx, message, schema)
        return result.model_dump(mode="json", by_alias=True, exclude_none=True)

    return ask


def _wants_progress(ctx: ServerContext) -> bool:
    """The call carries a progress token (`params._meta.progressToken`)."""
    meta = ctx.params.get("_meta") if isinstance(ctx.params, Mapping) else None
    return isinstance(meta, Mapping) and meta.get("progressToken") is not None


def _caller(ctx: ServerContext) -> Principal:
    principal = current_caller()
    if principal is None:  # the HTTP guard authenticates every request; reaching here is a wiring bug
        raise ToolCallFailed("Unauthorized")
    return principal
