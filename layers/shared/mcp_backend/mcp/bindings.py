"""The MCP tools, generated from the tool table (mcp_backend.tools.table): each synchronous tool under
its own name, and for each job-capable tool two that submit it (one job, or up to 100 at once), which the
jobs service enqueues. Only the protocol edge lives here: arguments in, the caller, errors out.

Every tool publishes its strict input model as inputSchema (unknown fields rejected); StrictArguments
validates `tools/call` arguments against it before the SDK does, naming fields, never values: a tool
execution error (isError) from 2025-11-25 on, a -32602 before (each era's server/tools "Error Handling").
Failures the tools report (a typed error with a safe message) reach the client as "<ErrorType>: <message>";
anything else is the SDK's generic tool error.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
import anyio.from_thread
import anyio.to_thread
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError as SdkToolError
from mcp.server.mcpserver.tools import Tool as SdkTool
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, CallToolResult, TextContent
from mcp_types.version import is_version_at_least
from pydantic import BaseModel, Field, ValidationError, create_model

from mcp_backend.api_keys import Principal
from mcp_backend.jobs.errors import JobRequestError
from mcp_backend.jobs.service import MAX_BATCH_ITEMS, JobsService, JobSubmission
from mcp_backend.mcp.guard import principal_of
from mcp_backend.netsafety import UnsafeUrl
from mcp_backend.observability import count_limit_refusal, logger
from mcp_backend.quotas import QuotaExceeded
from mcp_backend.tools.context import ProgressCallback, StrictInput
from mcp_backend.tools.errors import ToolError
from mcp_backend.tools.services import MissingToolService, ToolServices
from mcp_backend.tools.table import Access, Tool
from mcp_backend.validation import describe_validation_error

# Failures whose type and message are written to be shown to the caller.
REPORTED_ERRORS = (ToolError, JobRequestError, UnsafeUrl, QuotaExceeded)
# From this protocol version on, arguments that fail a tool's inputSchema are a tool execution error the model
# can correct itself from (SEP-1303, https://modelcontextprotocol.io/specification/2025-11-25/server/tools#error-handling;
# the same in https://modelcontextprotocol.io/specification/2026-07-28/server/tools#error-handling); before it,
# invalid arguments were a protocol error (https://modelcontextprotocol.io/specification/2025-06-18/server/tools).
INPUT_ERRORS_AS_RESULTS_SINCE = "2025-11-25"
T = TypeVar("T")


def reported(call: Callable[..., T], *args: Any) -> T:
    """`call(*args)`, a reported failure raised as the SDK's tool error "<ErrorType>: <message>"."""
    try:
        return call(*args)
    except REPORTED_ERRORS as error:
        raise SdkToolError(f"{type(error).__name__}: {error}") from None


def submit_model(tool: Tool) -> type[BaseModel]:
    """The tool's input plus a client-chosen idempotency key."""
    return create_model(
        _model_name(tool.submit_name),
        __base__=tool.input_model,
        callId=(
            str | None,
            Field(
                None,
                min_length=1,
                max_length=128,
                pattern=r"^[A-Za-z0-9._:-]+$",
                description="Client-chosen idempotency key: the same callId returns the same job and enqueues it once.",
            ),
        ),
    )


def submit_many_model(tool: Tool, item_model: type[BaseModel]) -> type[BaseModel]:
    """The published schema of a batch: every item is a submission of the tool."""
    return create_model(
        _model_name(tool.submit_many_name),
        __base__=StrictInput,
        items=(list[item_model], Field(min_length=1, max_length=MAX_BATCH_ITEMS)),  # type: ignore[valid-type]
    )


def submit_many_envelope(tool: Tool) -> type[BaseModel]:
    """What a batch call must satisfy as a whole: a list of 1 to 100 items. Each item is validated on its own,
    so an invalid item is that item's error entry and the valid ones are submitted."""
    return create_model(
        _model_name(tool.submit_many_name) + "Envelope",
        __base__=StrictInput,
        items=(list[Any], Field(min_length=1, max_length=MAX_BATCH_ITEMS)),
    )


def validated_items(model: type[BaseModel], items: list[Any]) -> tuple[list[tuple[int, BaseModel]], list[dict]]:
    """Items that satisfy `model`, with their positions, and an error entry (field names, never values) for
    each that does not."""
    valid, invalid = [], []
    for index, item in enumerate(items):
        try:
            valid.append((index, model.model_validate(item)))
        except ValidationError as error:
            message = describe_validation_error(error)
            invalid.append({"index": index, "error": {"type": "InvalidToolInput", "message": message}})
    return valid, invalid


def batch_item_refused(index: int, caller: Principal, cap: int) -> dict[str, Any]:
    """The error entry of an item past the caller's tier's batch size (counted as a refusal)."""
    refused = QuotaExceeded("batch_items", caller.tier, cap, "send the remaining items in another call")
    count_limit_refusal(refused.limit, refused.tier, caller.user_id, refused.resets)
    return {"index": index, "error": refused.as_error()}


def submission(tool_name: str, request: BaseModel) -> JobSubmission:
    job_input = request.model_dump(exclude={"callId"}, exclude_defaults=True, mode="json")
    return JobSubmission(tool=tool_name, input=job_input, call_id=getattr(request, "callId", None))


@dataclass(frozen=True)
class Binding:
    """One MCP tool: its name, text, strict input model, and the coroutine the SDK calls."""

    name: str
    description: str
    input_model: type[BaseModel]  # what StrictArguments enforces on the whole call
    call: Callable[..., Any]
    access: Access
    schema_model: type[BaseModel] | None = None  # the published inputSchema, when stricter than input_model


class ToolBindings:
    """The MCP surface of a tool table. Tools are looked up by name when called, so the table is the truth."""

    def __init__(self, table: Mapping[str, Tool], services: ToolServices) -> None:
        self.table = table
        self.services = services
        jobbed = [tool for tool in table.values() if tool.runs_as_job]
        if jobbed and services.jobs is None:
            raise MissingToolService("McpServer: job tools are submitted through the jobs service (JOB_TABLE_NAME)")
        self.jobs: JobsService = services.jobs  # type: ignore[assignment]
        self.bindings: list[Binding] = []
        for tool in jobbed:
            self.bindings.extend(self._submit_bindings(tool))
        self.bindings.extend(self._sync_binding(tool) for tool in table.values() if tool.runs_sync)
        self.input_models = {binding.name: binding.input_model for binding in self.bindings}
        # The scope each tool needs from an OAuth caller (the HTTP guard checks it before the SDK runs).
        self.access = {binding.name: binding.access for binding in self.bindings}
        # Tools whose calls are answered as an event stream: progress flows before the result.
        self.streaming_tools = frozenset(
            tool.name for tool in table.values() if tool.runs_sync and tool.streams_progress
        )

    def sdk_tools(self) -> list[SdkTool]:
        tools = []
        for binding in self.bindings:
            tool = SdkTool.from_function(binding.call, name=binding.name, description=binding.description)
            # Publish the strict model's schema (additionalProperties: false), the one StrictArguments enforces
            # (a batch publishes its items' schema too; they are validated one by one).
            tool.parameters = (binding.schema_model or binding.input_model).model_json_schema()
            tools.append(tool)
        logger.debug("mcp tools built", extra={"tools": [tool.name for tool in tools]})
        return tools

    # -- generated tools -----------------------------------------------------------
    def _sync_binding(self, tool: Tool) -> Binding:
        name, streams_progress = tool.name, tool.streams_progress

        async def call(ctx: Context, **arguments: Any) -> dict[str, Any]:
            principal = _caller(ctx)
            progress: ProgressCallback | None = None
            if streams_progress:
                # The first event goes out before the work (a download, say) starts.
                await ctx.report_progress(0.0, 1.0, "started")

                def progress(fraction: float, message: str) -> None:
                    anyio.from_thread.run(ctx.report_progress, min(max(fraction, 0.0), 1.0), 1.0, message)

            current = self.table[name]
            context = self.services.context_for(current, principal.user_id, progress, principal.tier)
            result = await anyio.to_thread.run_sync(reported, current, arguments, context)
            if streams_progress:
                await ctx.report_progress(1.0, 1.0, "done")
            return result

        suffix = " Runs now and streams progress notifications." if streams_progress else ""
        return Binding(
            name, tool.description + suffix, tool.input_model, _with_signature(call, tool.input_model), tool.access
        )

    def _submit_bindings(self, tool: Tool) -> list[Binding]:
        one = submit_model(tool)
        many = submit_many_envelope(tool)

        def refusal(request: BaseModel, user_id: str) -> ToolError | None:
            """The tool's own admission check for this caller (a dataset outside its prefix, say)."""
            if tool.admit is None:
                return None
            try:
                tool.admit(request, self.services.context_for(tool, user_id))
            except ToolError as refused:
                return refused
            return None

        async def submit(ctx: Context, **arguments: Any) -> dict[str, Any]:
            request, caller = one.model_validate(arguments), _caller(ctx)
            refused = refusal(request, caller.user_id)
            if refused is not None:
                raise SdkToolError(f"{refused.error_type}: {refused.message}")
            job = submission(tool.name, request)
            quota = self.services.job_quota(caller.tier)
            return await anyio.to_thread.run_sync(reported, self.jobs.submit, caller.user_id, job, quota)

        async def submit_many(ctx: Context, **arguments: Any) -> dict[str, Any]:
            caller = _caller(ctx)
            items = many.model_validate(arguments).items  # type: ignore[attr-defined]
            # Past the tier's batch size each item is its own refusal; the ones within it are submitted.
            cap = self.services.tier_limits(caller.tier).batch_items
            refused_items = [batch_item_refused(index, caller, cap) for index in range(cap, len(items))]
            valid, results = validated_items(one, items[:cap])
            results.extend(refused_items)
            admitted = []
            for index, item in valid:
                refused = refusal(item, caller.user_id)
                if refused is None:
                    admitted.append((index, item))
                else:
                    error = {"type": refused.error_type, "message": refused.message}
                    results.append({"index": index, "error": error})
            valid = admitted
            jobs = [submission(tool.name, item) for _, item in valid]
            quota = self.services.job_quota(caller.tier)
            submitted = await anyio.to_thread.run_sync(reported, self.jobs.submit_many, caller.user_id, jobs, quota)
            # The service numbers the valid items it was given; answer in the caller's positions.
            results.extend({**result, "index": valid[result["index"]][0]} for result in submitted)
            return {"results": sorted(results, key=lambda result: result["index"])}

        article = "an" if tool.name[:1] in "aeiou" else "a"
        return [
            Binding(
                tool.submit_name,
                f"Queue {article} {tool.name} job; returns {{jobId, status}}. Pass callId to make it idempotent.",
                one,
                _with_signature(submit, one),
                Access.SUBMIT,
            ),
            Binding(
                tool.submit_many_name,
                f"Queue many {tool.name} jobs at once; returns one jobId or error per item, in order "
                "(an invalid item is its own error; the others are queued).",
                many,
                _with_signature(submit_many, many),
                Access.SUBMIT,
                schema_model=submit_many_model(tool, one),
            ),
        ]


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


def _caller(ctx: Context) -> Principal:
    request = ctx.request_context.request
    principal = principal_of(request.scope) if request is not None else None
    if principal is None:  # the HTTP guard authenticates every request; reaching here is a wiring bug
        raise SdkToolError("Unauthorized")
    return principal


def _with_signature(call: Callable[..., Any], model: type[BaseModel]) -> Callable[..., Any]:
    """`call` as the SDK introspects it: a Context and one keyword parameter per field of `model`."""
    parameters = [inspect.Parameter("ctx", inspect.Parameter.KEYWORD_ONLY, annotation=Context)]
    for field_name, field in model.model_fields.items():
        default = inspect.Parameter.empty if field.is_required() else field.get_default(call_default_factory=True)
        parameters.append(
            inspect.Parameter(field_name, inspect.Parameter.KEYWORD_ONLY, annotation=field.annotation, default=default)
        )
    call.__signature__ = inspect.Signature(parameters, return_annotation=dict[str, Any])  # type: ignore[attr-defined]
    return call


def _model_name(tool_name: str) -> str:
    return "".join(part.capitalize() for part in tool_name.split("_")) + "Input"
