"""The tool table: every tool the backend offers, declared once. The MCP endpoint's tools
(mcp_backend.mcp.bindings) and the worker's (mcp_backend.jobs.worker, given the table) run from it.

Adding a tool (docs/adding-a-capability.md): a module with a strict input model, an output model and a
`run(request, ctx)` function, plus one entry in TOOLS below. Every entry says what it may do (`access` and
`effect`: there are no defaults, so a tool that writes cannot slip in as a read, nor one that deletes as
harmless) and which services it uses (`services`: it gets those and no others, on the endpoint and in the
worker alike). Its MCP annotations are derived from these fields (mcp_backend.mcp.bindings). A tool that runs
as a job also gets two MCP tools that submit it (one, and up to 100 at once), and the worker runs it; its
results are read back with get_job.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import TYPE_CHECKING, Any, TypeAlias

from pydantic import BaseModel, ValidationError

from mcp_backend.tools import analyze_dataset, app_views, dataset_chunks, endpoints, job_results
from mcp_backend.tools.context import ToolContext
from mcp_backend.tools.errors import InvalidToolInput, ToolError
from mcp_backend.tools.services import Service
from mcp_backend.validation import describe_validation_error

if TYPE_CHECKING:  # the durable worker's SDK loads only in the durable worker; the MCP types only on the endpoint
    from mcp_types import ContentBlock

    from mcp_backend.jobs.durable import ChunkedJob

# What a tool's run returns: a JSON object, or (a tool without an output model) the MCP content blocks to answer.
ToolAnswer: TypeAlias = "dict[str, Any] | list[ContentBlock]"


class Mode(StrEnum):
    SYNC = "sync"  # an MCP tool of its own name that runs on the endpoint
    JOB = "job"  # submitted to the job queue and run by the worker
    BOTH = "both"


class Access(StrEnum):
    """What an OAuth caller needs to call a tool: the scope <prefix>read or <prefix>submit (API keys carry
    both). A tool that writes anything, queues work or spends compute on the caller's behalf is SUBMIT."""

    READ = "read"  # only reads the caller's own jobs and endpoints
    SUBMIT = "submit"  # queues or runs work, or writes (every submit tool is SUBMIT)


class Effect(StrEnum):
    """What one synchronous call does to what the caller has: clients decide from it (as the tool's
    destructiveHint and idempotentHint) whether to ask before a call and whether a retry is safe."""

    NONE = "none"  # changes nothing the caller has (a read, a computation): a repeat is harmless
    ADDS = "adds"  # creates something new each call: a repeat adds another
    CHANGES = "changes"  # replaces, stops or deletes what exists: a repeat changes nothing more


@dataclass(frozen=True, kw_only=True)
class Tool:
    name: str
    description: str
    input_model: type[BaseModel]
    run: Callable[[Any, ToolContext], ToolAnswer]
    # Required, no default: the scope its synchronous MCP tool needs; submitting it as a job always needs SUBMIT.
    access: Access
    # Required, no default: what it uses besides its input (an empty set for a tool that needs none).
    services: frozenset[Service]
    # Required, no default: what a synchronous call changes (submitting it as a job always ADDS a job).
    effect: Effect
    # Its answer (structuredContent, and a job's result), published as the tool's outputSchema. None: its run
    # returns MCP content blocks (the SDK's ImageContent, AudioContent, EmbeddedResource ...), answered as they are,
    # with no outputSchema; such a tool runs only synchronously (a job's result is JSON).
    output_model: type[BaseModel] | None
    mode: Mode = Mode.SYNC
    # The MCP tools that submit it as a job (one, many); default submit_<name> and submit_<name>_batch.
    submit_names: tuple[str, str] | None = None
    # Synchronous calls send progress notifications ("started" before run, "done" after, and the tool's own).
    streams_progress: bool = False
    # It fetches from the network on the caller's behalf: each synchronous call holds one of the caller's
    # calls-in-flight slots (docs/security.md) and ends by the synchronous-call deadline.
    reaches_network: bool = False
    # Checks a job's input for its caller before the job is queued (raises a ToolError): a refusal writes nothing.
    admit: Callable[[Any, ToolContext], None] | None = None
    # Before a job of it is queued: the question the user must confirm for this input (a large or costly run),
    # or None to queue it at once. Asked through the 2026-07-28 multi-round-trip request (mcp_backend.mcp.asking).
    confirm: Callable[[Any], str | None] | None = None
    # Its synchronous run may ask its user mid-call (`ctx.ask`, a form elicitation): a 2025-era call asks on its
    # open event stream and waits for the answer (mcp_backend.mcp.open_stream); a client that cannot be asked gets a
    # tool error (CannotAsk).
    asks: bool = False
    # The MCP Apps view (a `ui://` resource of the resource table) a host renders its synchronous result in.
    ui_resource_uri: str | None = None
    # Its jobs may outlast the queued worker's timeout: every job of it runs as a durable execution when the
    # durable worker is on (mcp_backend.jobs.handoff), else in the queued worker as any other job.
    long_running: bool = False
    # How the durable worker runs it in checkpointed chunks (mcp_backend.jobs.durable.ChunkedJob); None: whole,
    # in one step.
    chunked: ChunkedJob | None = None
    # The size of what a job of it reads, where known before the run (None: unknown): a job whose input is at
    # least DURABLE_JOB_MIN_BYTES runs in the durable worker when that is on.
    input_bytes: Callable[[Any, ToolContext], int | None] | None = None

    def __post_init__(self) -> None:
        if self.access is Access.READ and self.effect is not Effect.NONE:
            raise ValueError(f"{self.name}: a READ tool changes nothing (effect NONE); one that does is SUBMIT")
        if self.output_model is None and self.mode is not Mode.SYNC:
            raise ValueError(f"{self.name}: a tool that answers content blocks runs only synchronously")

    @property
    def runs_sync(self) -> bool:
        return self.mode in (Mode.SYNC, Mode.BOTH)

    @property
    def runs_as_job(self) -> bool:
        return self.mode in (Mode.JOB, Mode.BOTH)

    @property
    def submit_name(self) -> str:
        return self.submit_names[0] if self.submit_names else f"submit_{self.name}"

    @property
    def submit_many_name(self) -> str:
        return self.submit_names[1] if self.submit_names else f"submit_{self.name}_batch"

    def parse_input(self, arguments: dict[str, Any]) -> BaseModel:
        try:
            return self.input_model.model_validate(arguments)
        except ValidationError as error:
            raise InvalidToolInput(f"{self.name}: {describe_validation_error(error)}") from None

    def answer(self, arguments: dict[str, Any], context: ToolContext) -> ToolAnswer:
        """A synchronous call's answer: the JSON object, or the content blocks of a tool without an output model."""
        return self.run(self.parse_input(arguments), context)

    def __call__(self, arguments: dict[str, Any], context: ToolContext) -> dict[str, Any]:
        """A job's result, always a JSON object (a tool that answers content blocks never runs as a job)."""
        value = self.answer(arguments, context)
        if not isinstance(value, dict):
            raise ToolError(f"{self.name} answers content blocks, not a JSON result")
        return value

    def input_size(self, arguments: dict[str, Any], context: ToolContext) -> int | None:
        """What a job of it would read, in bytes, or None when unknown, or when its input is refused (the run
        reports why, as for any job)."""
        if self.input_bytes is None:
            return None
        try:
            return self.input_bytes(self.parse_input(arguments), context)
        except ToolError:
            return None


TOOLS: dict[str, Tool] = {
    tool.name: tool
    for tool in (
        Tool(
            name="get_job",
            description=(
                "Status, result or error of one of your jobs; large results come in pages (pass nextCursor back)."
            ),
            input_model=job_results.GetJobInput,
            run=job_results.get_job,
            output_model=job_results.JobView,
            access=Access.READ,
            services=frozenset({Service.JOBS}),
            effect=Effect.NONE,
        ),
        Tool(
            name="list_failed_jobs",
            description=(
                "Your failed jobs, newest first, with the error the worker recorded; more pages with nextCursor."
            ),
            input_model=job_results.ListFailedJobsInput,
            run=job_results.list_failed_jobs,
            output_model=job_results.FailedJobs,
            access=Access.READ,
            services=frozenset({Service.JOBS}),
            effect=Effect.NONE,
        ),
        Tool(
            name="cancel_job",
            description=(
                "Cancel one of your queued or running jobs: it is not run, or stops at its next checkpoint, "
                "and reports no result. A finished job cannot be cancelled."
            ),
            input_model=job_results.CancelJobInput,
            run=job_results.cancel_job,
            output_model=job_results.CancelledJob,
            access=Access.SUBMIT,  # changes a job's state
            services=frozenset({Service.JOBS}),
            effect=Effect.CHANGES,  # a repeat finds it cancelled: nothing more changes
        ),
        Tool(
            name="analyze_dataset",
            description="Row count, columns and per-column statistics of a CSV or JSON dataset (s3:// or https://).",
            input_model=analyze_dataset.AnalyzeInput,
            run=analyze_dataset.run,
            output_model=analyze_dataset.AnalyzeOutput,
            mode=Mode.BOTH,
            submit_names=("submit_analysis", "submit_analyses"),
            streams_progress=True,
            reaches_network=True,
            access=Access.SUBMIT,  # fetches and computes on the endpoint
            services=frozenset(),
            effect=Effect.NONE,  # reads the dataset, writes nothing
            admit=analyze_dataset.admit,
            confirm=analyze_dataset.confirmation_question,
            ui_resource_uri=app_views.ANALYSIS_VIEW_URI,
            chunked=dataset_chunks.DatasetChunks(),
            input_bytes=analyze_dataset.dataset_bytes,
        ),
        Tool(
            name="register_endpoint",
            description="Register an MCP endpoint to probe every schedule tick; returns its serverId.",
            input_model=endpoints.RegisterEndpointInput,
            run=endpoints.register_endpoint,
            output_model=endpoints.RegisteredEndpoint,
            access=Access.SUBMIT,
            services=frozenset({Service.ENDPOINTS}),
            effect=Effect.CHANGES,  # the same owner and URL re-register (replacing name and token)
        ),
        Tool(
            name="unregister_endpoint",
            description="Unregister one of your endpoints: its probes and alerts stop, and it no longer counts "
            "against your tier's endpoint limit.",
            input_model=endpoints.UnregisterEndpointInput,
            run=endpoints.unregister_endpoint,
            output_model=endpoints.UnregisteredEndpoint,
            access=Access.SUBMIT,  # deletes
            services=frozenset({Service.ENDPOINTS}),
            effect=Effect.CHANGES,  # deletes
        ),
        Tool(
            name="list_endpoints",
            description="Your registered MCP endpoints (serverId, name, url).",
            input_model=endpoints.ListEndpointsInput,
            run=endpoints.list_endpoints,
            output_model=endpoints.EndpointList,
            access=Access.READ,
            services=frozenset({Service.ENDPOINTS}),
            effect=Effect.NONE,
        ),
        Tool(
            name="endpoint_status",
            description="One endpoint's latest probe, uptime over the window and last schema change.",
            input_model=endpoints.EndpointStatusInput,
            run=endpoints.endpoint_status,
            output_model=endpoints.EndpointStatus,
            access=Access.READ,
            services=frozenset({Service.ENDPOINTS}),
            effect=Effect.NONE,
        ),
    )
}


def job_tools(table: dict[str, Tool]) -> list[Tool]:
    return [tool for tool in table.values() if tool.runs_as_job]


def servable_tools(table: Mapping[str, Tool], available: frozenset[Service]) -> dict[str, Tool]:
    """The tools a function can offer with the services its environment builds. A part of the stack that is off
    (JobPipeline or Probes Disabled: docs/deploy.md "Profiles") leaves its variables unset: a tool declaring its
    service is not offered (a call to it is an unknown tool, never a 500), and a tool that also runs as a job is
    offered synchronously only without the jobs service."""
    offered = {}
    for name, tool in table.items():
        if tool.services - available:
            continue
        if tool.runs_as_job and Service.JOBS not in available:
            if not tool.runs_sync:
                continue
            tool = replace(tool, mode=Mode.SYNC)
        offered[name] = tool
    return offered
