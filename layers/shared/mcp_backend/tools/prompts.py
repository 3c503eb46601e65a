"""The prompt table: every MCP prompt the backend offers, declared once, as tools are in the tool table. The MCP
endpoint (mcp_backend.mcp.prompts) serves it: prompts/list, prompts/get and completion/complete.

Adding a prompt (docs/adding-a-capability.md): a strict arguments model (MCP prompt arguments are strings;
pydantic converts them), a `render(arguments, ctx)` that returns the messages, and one entry in PROMPTS with
the access an OAuth caller needs and the services it reads. A prompt whose services the function lacks is not
served.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import AwareDatetime, BaseModel, Field

from mcp_backend.jobs.errors import JobNotFound
from mcp_backend.jobs.models import JOB_ID_PATTERN
from mcp_backend.tools.context import StrictInput, ToolContext
from mcp_backend.tools.errors import ToolError
from mcp_backend.tools.resources import finished_job_ids, job_uri, result_uri
from mcp_backend.tools.services import Service
from mcp_backend.tools.table import Access


class PromptArgumentsRefused(ToolError):
    """The arguments name something the caller cannot use (a job that is not theirs, or not finished)."""


@dataclass(frozen=True)
class PromptLine:
    """One user message: text; or a link to one of the caller's resources (`link_uri`, with `text` its name);
    or, with `embed`, the resource at `link_uri` carried in the message (`text` its contents); or an image
    (`image`, its bytes, of MIME type `mime_type`)."""

    text: str
    link_uri: str | None = None
    mime_type: str = "application/json"
    embed: bool = False
    image: bytes | None = None

    def __post_init__(self) -> None:
        if self.embed and self.link_uri is None:
            raise ValueError("an embedded resource needs its link_uri")


@dataclass(frozen=True, kw_only=True)
class Prompt:
    name: str
    title: str
    description: str
    arguments_model: type[BaseModel]
    # Called with an instance of arguments_model.
    render: Callable[[Any, ToolContext], list[PromptLine]]
    # Required, no default: the scope an OAuth caller needs to get it (prompts read the caller's jobs).
    access: Access
    # Required, no default: what rendering reads (it gets those and no others).
    services: frozenset[Service]
    # Argument -> the caller's values that start with a prefix (completion/complete).
    completions: dict[str, Callable[[str, ToolContext], list[str]]] = field(default_factory=dict)


class SummariseArguments(StrictInput):
    job_id: str = Field(pattern=JOB_ID_PATTERN, description="A finished job of yours (completion offers them)")


class InvestigateArguments(StrictInput):
    since: AwareDatetime | None = Field(None, description="Only failures at or after this ISO 8601 time")
    limit: int = Field(10, ge=1, le=50, description="How many failures at most (1-50, default 10)")


def summarise_analysis(arguments: SummariseArguments, ctx: ToolContext) -> list[PromptLine]:
    try:
        state = ctx.job_service().state(ctx.user_id, arguments.job_id)
    except JobNotFound:
        raise PromptArgumentsRefused(f"job_id: you have no job {arguments.job_id}") from None
    if not state["hasResult"]:
        raise PromptArgumentsRefused(f"job_id: job {arguments.job_id} has no result yet ({state['status']})")
    return [
        PromptLine(
            f"Summarise the {state.get('tool') or 'analysis'} job {arguments.job_id} for an analyst: what the "
            "dataset holds (rows, columns), the notable statistics per column, and anything that looks wrong "
            "(missing values, outliers, a column whose type is not what its name suggests). Read its result from "
            "the linked resource; a large result comes in pages (_meta.nextUri)."
        ),
        PromptLine(f"Result of job {arguments.job_id}", link_uri=result_uri(arguments.job_id)),
    ]


def investigate_failed_jobs(arguments: InvestigateArguments, ctx: ToolContext) -> list[PromptLine]:
    failed = ctx.job_service().failed(ctx.user_id, arguments.limit)["failedJobs"]
    if arguments.since is not None:
        failed = [job for job in failed if _at_or_after(job.get("failedAt"), arguments.since)]
    lines = [
        f"- {job['jobId']} ({job.get('tool')}, failed {job.get('failedAt')}): "
        f"{(job.get('error') or {}).get('type', 'unknown')}: {(job.get('error') or {}).get('message', '')}"
        for job in failed
    ]
    window = f" since {arguments.since.isoformat()}" if arguments.since else ""
    listing = "\n".join(lines) if lines else "(none)"
    return [
        PromptLine(
            f"Investigate my failed jobs{window}. Group them by cause, say for each cause whether a retry can "
            "succeed or the input must change, and what to change. Use get_job for a job's details.\n\n"
            f"Failed jobs, newest first:\n{listing}"
        ),
        *(PromptLine(f"Job {job['jobId']}", link_uri=job_uri(job["jobId"])) for job in failed),
    ]


def _at_or_after(failed_at: object, since: datetime) -> bool:
    try:
        return isinstance(failed_at, str) and datetime.fromisoformat(failed_at) >= since
    except ValueError:
        return False


PROMPTS: dict[str, Prompt] = {
    prompt.name: prompt
    for prompt in (
        Prompt(
            name="summarise_analysis",
            title="Summarise a finished analysis",
            description="A summary of one of your finished analysis jobs: its dataset, notable statistics, issues.",
            arguments_model=SummariseArguments,
            render=summarise_analysis,
            access=Access.READ,
            services=frozenset({Service.JOBS}),
            completions={"job_id": finished_job_ids},
        ),
        Prompt(
            name="investigate_failed_jobs",
            title="Investigate failed jobs",
            description="Your recent failed jobs with their errors, and a request to group them by cause.",
            arguments_model=InvestigateArguments,
            render=investigate_failed_jobs,
            access=Access.READ,
            services=frozenset({Service.JOBS}),
        ),
    )
}
