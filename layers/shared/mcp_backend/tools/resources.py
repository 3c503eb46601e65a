"""The resource table: every kind of MCP resource the backend serves, declared once, as tools are in the tool
table. The MCP endpoint (mcp_backend.mcp.resources) serves it: resources/list, resources/templates/list,
resources/read, and the resource links in tool results.

Adding a kind (docs/adding-a-capability.md): one entry in RESOURCES with its URI template, the model of its
variables (parsed as a prompt's arguments are), the access an OAuth caller needs (`access`, no default), the
services it reads (`services`: it gets those and no others) and the function that reads one resource for the
caller. A kind whose services the function lacks is not served at all: its URIs are "not found" and it is not
listed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pydantic_core
from pydantic import Field

from mcp_backend.jobs.errors import JobNotFound
from mcp_backend.jobs.models import JOB_ID_PATTERN
from mcp_backend.tools import app_views
from mcp_backend.tools.context import StrictInput, ToolContext
from mcp_backend.tools.services import Service
from mcp_backend.tools.table import Access

JOB_URI = "job://{jobId}"
RESULT_URI = "job://{jobId}/result"
JSON = "application/json"
# A page of a result too large for one read is a piece of its JSON text, not a JSON document of its own.
JSON_FRAGMENT = "text/plain"


class ResourceNotFound(Exception):
    """No resource of the caller's at this URI: unknown, malformed, someone else's or gone are all alike."""


@dataclass(frozen=True)
class ResourceText:
    """One read: the text, its MIME type and what a client needs to read the rest (`meta`)."""

    text: str
    mime_type: str
    meta: dict[str, Any] | None = None


@dataclass(frozen=True)
class ResourceBytes:
    """One read of a binary resource: its bytes (sent base64 as `blob`), MIME type and `meta`."""

    data: bytes
    mime_type: str
    meta: dict[str, Any] | None = None


@dataclass(frozen=True)
class ListedResource:
    uri: str
    name: str
    title: str
    mime_type: str


@dataclass(frozen=True)
class ResourcePage:
    resources: list[ListedResource]
    next_cursor: str | None = None


@dataclass(frozen=True, kw_only=True)
class ResourceKind:
    name: str
    # RFC 6570: the variables it matches, parsed into `variables` (its fields are the template's variables), are
    # passed to `read`; a query variable is optional.
    uri_template: str
    variables: type[StrictInput]
    title: str
    description: str
    mime_type: str
    # Called with an instance of `variables`.
    read: Callable[[Any, ToolContext], ResourceText | ResourceBytes]
    # Required, no default: the scope an OAuth caller needs to list and read it.
    access: Access
    # Required, no default: what it reads besides the URI (it gets those and no others).
    services: frozenset[Service]
    # Lists the caller's resources of this kind, a page at a time (None: found by template and links only).
    list_page: Callable[[ToolContext, int, str | None], ResourcePage] | None = None
    # Completes one of its URI template's variables for the caller: variable -> values starting with a prefix.
    completions: dict[str, Callable[[str, ToolContext], list[str]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.access is not Access.READ:
            raise ValueError(f"{self.name}: a resource is read, so its access is READ")


class NoVariables(StrictInput):
    pass


class JobVariables(StrictInput):
    jobId: str = Field(pattern=JOB_ID_PATTERN)


class ResultVariables(JobVariables):
    page: int = Field(0, ge=0, le=1_000_000)


def job_uri(job_id: str) -> str:
    return JOB_URI.format(jobId=job_id)


def result_uri(job_id: str, page: int = 0) -> str:
    return RESULT_URI.format(jobId=job_id) + (f"?page={page}" if page else "")


def read_job(variables: JobVariables, ctx: ToolContext) -> ResourceText:
    """The job's state: status, tool, timestamps, error, and the URI of its result once it has one."""
    try:
        state = ctx.job_service().state(ctx.user_id, variables.jobId)
    except JobNotFound:
        raise ResourceNotFound from None
    if state.pop("hasResult"):
        state["resultUri"] = result_uri(variables.jobId)
    return ResourceText(pydantic_core.to_json(state, fallback=str).decode(), JSON)


def read_result(variables: ResultVariables, ctx: ToolContext) -> ResourceText:
    """One page of the job's result JSON text (ranged reads of the result bucket); `meta` says which of how many,
    and the URI of the next."""
    try:
        page = ctx.job_service().result_page(ctx.user_id, variables.jobId, variables.page)
    except JobNotFound:
        raise ResourceNotFound from None
    meta: dict[str, Any] = {"page": page.page, "pages": page.pages, "totalBytes": page.total_bytes}
    if page.page + 1 < page.pages:
        meta["nextUri"] = result_uri(variables.jobId, page.page + 1)
    return ResourceText(page.text, JSON if page.pages == 1 else JSON_FRAGMENT, meta)


def read_analysis_view(variables: NoVariables, ctx: ToolContext) -> ResourceText:
    """The MCP Apps view analyze_dataset links (`_meta.ui.resourceUri`): it shows the result the host sends it."""
    return ResourceText(app_views.ANALYSIS_VIEW, app_views.APP_MIME_TYPE, app_views.UI_META)


def read_job_view(variables: JobVariables, ctx: ToolContext) -> ResourceText:
    """The caller's job as an MCP Apps HTML page, every value escaped."""
    page = app_views.read_job_view(variables.jobId, ctx)
    if page is None:
        raise ResourceNotFound
    return ResourceText(page, app_views.APP_MIME_TYPE, app_views.UI_META)


def list_jobs(ctx: ToolContext, limit: int, cursor: str | None) -> ResourcePage:
    jobs, next_cursor = ctx.job_service().jobs(ctx.user_id, limit, cursor)
    listed = [
        ListedResource(
            uri=job_uri(job["jobId"]),
            name=job["jobId"],
            title=f"{job.get('tool') or 'job'} {job.get('status', '').lower()} ({job.get('createdAt', '')})",
            mime_type=JSON,
        )
        for job in jobs
    ]
    return ResourcePage(listed, next_cursor)


# How many of the caller's newest jobs a completion looks through, and how many values it offers (the spec's
# maximum per completion/complete answer is 100).
COMPLETION_SCAN = 200
COMPLETION_VALUES = 100


def job_ids(prefix: str, ctx: ToolContext, finished_only: bool = False) -> list[str]:
    """The caller's newest job ids starting with `prefix` (only finished ones with `finished_only`)."""
    jobs, _ = ctx.job_service().jobs(ctx.user_id, COMPLETION_SCAN)
    found = [
        job["jobId"]
        for job in jobs
        if job["jobId"].startswith(prefix) and (not finished_only or job.get("status") == "SUCCEEDED")
    ]
    return found[:COMPLETION_VALUES]


def finished_job_ids(prefix: str, ctx: ToolContext) -> list[str]:
    return job_ids(prefix, ctx, finished_only=True)


RESOURCES: dict[str, ResourceKind] = {
    kind.name: kind
    for kind in (
        ResourceKind(
            name="job",
            uri_template=JOB_URI,
            variables=JobVariables,
            title="Job",
            description="One of your jobs: status, tool, timestamps, error, and resultUri once it has a result.",
            mime_type=JSON,
            read=read_job,
            access=Access.READ,
            services=frozenset({Service.JOBS}),
            list_page=list_jobs,
            completions={"jobId": job_ids},
        ),
        ResourceKind(
            name="job-result",
            uri_template=RESULT_URI + "{?page}",
            variables=ResultVariables,
            title="Job result",
            description="A finished job's result (JSON). A large result is read in pages: ?page=N, from 0; "
            "_meta says which page of how many and gives nextUri; concatenate the pages' text in order.",
            mime_type=JSON,
            read=read_result,
            access=Access.READ,
            services=frozenset({Service.JOBS}),
            completions={"jobId": finished_job_ids},
        ),
        ResourceKind(
            name="analysis-view",
            uri_template=app_views.ANALYSIS_VIEW_URI,
            variables=NoVariables,
            title="Analysis result view",
            description="MCP Apps view of an analyze_dataset result (HTML; shows the result its host sends it).",
            mime_type=app_views.APP_MIME_TYPE,
            read=read_analysis_view,
            access=Access.READ,
            services=frozenset(),
        ),
        ResourceKind(
            name="job-view",
            uri_template=app_views.JOB_VIEW_URI,
            variables=JobVariables,
            title="Job view",
            description="MCP Apps view of one of your jobs: status, error and result as an HTML page.",
            mime_type=app_views.APP_MIME_TYPE,
            read=read_job_view,
            access=Access.READ,
            services=frozenset({Service.JOBS}),
            completions={"jobId": finished_job_ids},
        ),
    )
}
