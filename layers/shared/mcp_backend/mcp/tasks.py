"""The MCP Tasks extension (`io.modelcontextprotocol/tasks`, 2026-07-28), served from JobTable and JobQueue.

A client that declares the extension in a tools/call's `params._meta` clientCapabilities and calls a
job-capable tool under its own name gets a task handle (`resultType: "task"`) at once: the job is enqueued
exactly once, as submit_<tool> does, and the handle is answered only after the job's record is written (a
consistent read finds it), so tasks/get for it succeeds from any instance. tasks/get, tasks/cancel and
tasks/update read and write JobTable only (a confirmed task's job is then queued): nothing about a task lives in
the memory of the instance that created it, so any Lambda environment answers for any task.

A tool that wants a large run confirmed (its table entry's `confirm`) makes a task that waits in
`input_required`: its job is recorded but held, unqueued, with the question (`inputRequests.confirm`, a form
elicitation) on its JobTable item. tasks/update with the answer queues it (once: the write that takes the held
message is conditional) or, declined, cancels it.

A task belongs to the principal that created it: another principal's task id is "not found". A client that
does not declare the extension gets today's behaviour (the result of the synchronous tool, or -32021 for a
tool that only runs as a job). The 2025-11-25 task-augmented calls are served beside it (mcp_backend.mcp.tasks_2025).
Specification: https://modelcontextprotocol.github.io/ext-tasks/specification/2026-07-28/tasks.html
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.extension import Extension, MethodBinding
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, CallToolRequestParams, RequestParams
from mcp_types.jsonrpc import MISSING_REQUIRED_CLIENT_CAPABILITY
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ConfigDict, Field

from mcp_backend.api_keys import Principal
from mcp_backend.jobs.errors import JobAlreadyFinished, JobNotFound
from mcp_backend.jobs.models import JOB_ID_PATTERN, JobStatus
from mcp_backend.mcp.asking import CONFIRM, confirm_request, confirmed
from mcp_backend.mcp.auth import ScopedPrincipal, current_caller
from mcp_backend.mcp.bindings import REPORTED_ERRORS
from mcp_backend.mcp.worker_threads import run_in_worker_thread
from mcp_backend.netsafety import UnsafeUrl
from mcp_backend.observability import logger
from mcp_backend.tools.errors import InvalidToolInput, ToolError
from mcp_backend.tools.resources import result_uri
from mcp_backend.tools.submissions import JobSubmissions
from mcp_backend.tools.table import Access

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
# The extension's methods exist in the 2026-07-28 era only; 2025-11-25 has its own (mcp_backend.mcp.tasks_2025).
TASK_ERA = frozenset(MODERN_PROTOCOL_VERSIONS)
# How often a client should poll tasks/get: a job takes seconds at least (queue batching window, cold start).
POLL_INTERVAL_MS = 2000
NOT_FOUND = "Failed to retrieve task: Task not found"
EXPIRED = "Failed to retrieve task: Task has expired"
STATUS_MESSAGES = {
    JobStatus.PENDING: "Queued; waiting for a worker.",
    JobStatus.RUNNING: "Running.",
    JobStatus.SUCCEEDED: "Completed.",
    JobStatus.CANCELLED: "Cancelled by its owner.",
}


class TaskParams(RequestParams):
    """tasks/get and tasks/cancel: the task's id. A malformed id is invalid params (-32602)."""

    # Built with the first tasks/* request, not with the app.
    model_config = ConfigDict(extra="allow", hide_input_in_errors=True, defer_build=True)

    task_id: str = Field(alias="taskId", min_length=1, max_length=128)


class TaskUpdateParams(TaskParams):
    input_responses: dict[str, Any] = Field(alias="inputResponses")


def tool_error_types() -> frozenset[str]:
    """The error types a tool reports as its result (isError), as opposed to failures of the pipeline."""
    names: set[str] = set()
    pending: list[type[BaseException]] = [ToolError, UnsafeUrl]
    while pending:
        error_type = pending.pop()
        names.add(error_type.__name__)
        pending.extend(error_type.__subclasses__())
    return frozenset(names)


def _epoch(timestamp: str) -> float:
    return datetime.fromisoformat(timestamp).timestamp()


def tool_result(result: dict[str, Any]) -> dict[str, Any]:
    """The 2026-07-28 CallToolResult the synchronous tool would have answered: structured content and its JSON
    text (a 2026 Result carries its resultType)."""
    text = json.dumps(result, separators=(",", ":"), default=str)
    return {
        "resultType": "complete",
        "content": [{"type": "text", "text": text}],
        "structuredContent": result,
        "isError": False,
    }


def paged_result(first_page: dict[str, Any]) -> dict[str, Any]:
    """A result too large for one answer: its first page as the structured content, and how to read the rest."""
    text = (
        f"The result is {first_page['resultChars']} bytes of JSON text; this is its first page (resultChunk). "
        "Read it whole from the linked resource (in pages, _meta.nextUri), or the next pages with "
        "get_job(jobId, cursor=nextCursor), and join the chunks in order."
    )
    job_id = str(first_page["jobId"])
    link = {
        "type": "resource_link",
        "uri": result_uri(job_id),
        "name": f"{job_id}-result",
        "mimeType": "application/json",
        "size": first_page["resultChars"],
    }
    return {
        "resultType": "complete",
        "content": [{"type": "text", "text": text}, link],
        "structuredContent": first_page,
        "isError": False,
    }


def tool_error_result(message: str) -> dict[str, Any]:
    """A CallToolResult that reports the tool's failure (isError), as the synchronous tool would."""
    return {"resultType": "complete", "content": [{"type": "text", "text": message}], "isError": True}


class JobTasks(Extension):
    """Tasks over the job pipeline: job-capable tools become tasks for clients that declare the extension."""

    identifier = TASKS_EXTENSION

    def __init__(self, submissions: JobSubmissions) -> None:
        self.submissions = submissions
        self.jobs = submissions.jobs
        self.task_tools = submissions.tools
        self._tool_errors = tool_error_types()

    def methods(self) -> Sequence[MethodBinding]:
        return (
            MethodBinding("tasks/get", TaskParams, self.get, protocol_versions=TASK_ERA),
            MethodBinding("tasks/cancel", TaskParams, self.cancel, protocol_versions=TASK_ERA),
            MethodBinding("tasks/update", TaskUpdateParams, self.update, protocol_versions=TASK_ERA),
        )

    # -- tools/call -------------------------------------------------------------
    async def intercept_tool_call(
        self, params: CallToolRequestParams, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        tool = self.task_tools.get(params.name)
        if tool is None:
            return await call_next(ctx)
        if ctx.protocol_version not in TASK_ERA or not _declares_tasks(ctx):
            if tool.runs_sync:
                return await call_next(ctx)
            raise missing_tasks_capability()  # the spec's answer when a request can only be served as a task
        caller = task_caller(ctx)
        try:
            # The one submission policy every door applies: validation, the tool's admission, the tier's quota.
            # A job its tool wants confirmed waits in `input_required` until tasks/update answers.
            submitted = await run_in_worker_thread(
                self.submissions.submit, caller, tool.name, dict(params.arguments or {}), True
            )
        except InvalidToolInput as error:
            raise MCPError(INVALID_PARAMS, f"{tool.name}: {error}") from None
        except REPORTED_ERRORS as error:
            # Not enqueued: the tool call's own error result, as submit_<tool> reports it.
            return tool_error_result(f"{type(error).__name__}: {error}")
        # submit returns once the job's record holds its message id: a consistent read finds it now.
        task = await run_in_worker_thread(self.task, caller, submitted["jobId"])
        logger.info("task created", extra={"job_id": submitted["jobId"], "tool": tool.name})
        return {"resultType": "task", **task}

    # -- tasks/* ----------------------------------------------------------------
    async def get(self, ctx: ServerRequestContext[Any, Any], params: TaskParams) -> dict[str, Any]:
        _require_tasks(ctx)
        return await run_in_worker_thread(self.task, task_caller(ctx), params.task_id)

    async def cancel(self, ctx: ServerRequestContext[Any, Any], params: TaskParams) -> dict[str, Any]:
        _require_tasks(ctx)
        caller = task_caller(ctx)
        await run_in_worker_thread(self.owned, caller, params.task_id)  # not found / expired / scope first
        try:
            await run_in_worker_thread(self.jobs.cancel, caller.user_id, params.task_id)
        except JobAlreadyFinished:
            raise MCPError(INVALID_PARAMS, "Cannot cancel task: already in a terminal status") from None
        return {}

    async def update(self, ctx: ServerRequestContext[Any, Any], params: TaskUpdateParams) -> dict[str, Any]:
        """The answer to a task's outstanding question: confirmed, its job is queued (once, whichever instance
        answers); declined, the task is cancelled. A task with no question outstanding ignores the responses
        and acknowledges, as the spec has it; an answer that does not fit the form is -32602."""
        _require_tasks(ctx)
        caller = task_caller(ctx)
        item = await run_in_worker_thread(self.owned, caller, params.task_id)
        if "awaitingInput" not in item or CONFIRM not in params.input_responses:
            return {}
        if confirmed(params.input_responses):
            await run_in_worker_thread(self.jobs.release, caller.user_id, params.task_id)
            logger.info("task confirmed", extra={"job_id": params.task_id})
        else:
            try:
                await run_in_worker_thread(self.jobs.cancel, caller.user_id, params.task_id)
            except JobAlreadyFinished:  # cancelled meanwhile: nothing left to decline
                pass
        return {}

    # -- the task as JobTable holds it ------------------------------------------
    def owned(self, caller: Principal, task_id: str) -> dict[str, Any]:
        """The caller's task as JobTable holds it: not found, expired, or refused when the caller's access token
        lacks the scope the task's tool needs (the scope its task-augmented tools/call needed)."""
        if not _is_job_id(task_id):
            raise MCPError(INVALID_PARAMS, NOT_FOUND)
        try:
            item = self.jobs.owned(caller.user_id, task_id)
        except JobNotFound:
            raise MCPError(INVALID_PARAMS, NOT_FOUND) from None
        if float(item.get("expiresAt", 0)) <= time.time():
            # DynamoDB deletes expired items within days, not at once; past its TTL a task is gone.
            raise MCPError(INVALID_PARAMS, EXPIRED)
        if isinstance(caller, ScopedPrincipal):
            # The job item records its tool; a tool no longer in the table needs the strictest scope.
            tool = self.task_tools.get(str(item.get("tool", "")))
            needed = tool.access if tool is not None else Access.SUBMIT
            if needed not in caller.access:
                raise insufficient_task_scope(needed)
        return item

    def task(self, caller: Principal, task_id: str) -> dict[str, Any]:
        item = self.owned(caller, task_id)
        user_id = caller.user_id
        status = JobStatus(item["status"])
        created = str(item["createdAt"])
        task: dict[str, Any] = {
            "taskId": task_id,
            "status": "working",
            "statusMessage": STATUS_MESSAGES.get(status, ""),
            "createdAt": created,
            "lastUpdatedAt": str(item.get("updatedAt", created)),
            "ttlMs": max(0, round((float(item["expiresAt"]) - _epoch(created)) * 1000)),
            "pollIntervalMs": POLL_INTERVAL_MS,
        }
        if status in (JobStatus.PENDING, JobStatus.RUNNING) and "awaitingInput" in item:
            question = str(item["awaitingInput"])
            task.update(
                status="input_required",
                statusMessage="Waiting for your confirmation (tasks/update).",
                inputRequests={CONFIRM: confirm_request(question).model_dump(by_alias=True, exclude_none=True)},
            )
        elif status == JobStatus.RUNNING and item.get("progressMessage"):
            # A durable job reports each step: the task's status message says how far it got.
            task["statusMessage"] = f"{STATUS_MESSAGES.get(status, '')} {item['progressMessage']}".strip()
        elif status == JobStatus.SUCCEEDED:
            # The result whole when it fits one page; else its first page (one ranged read, never the whole
            # object on every poll), with the cursor get_job reads the rest with.
            first = self.jobs.page(user_id, task_id)
            if "result" in first:
                task.update(status="completed", result=tool_result(first["result"]))
            else:
                task.update(status="completed", result=paged_result(first))
        elif status == JobStatus.CANCELLED:
            task["status"] = "cancelled"
        elif status == JobStatus.FAILED:
            error = item.get("error") or {}
            error_type, message = str(error.get("type", "JobFailed")), str(error.get("message", ""))
            task["statusMessage"] = f"{error_type}: {message}"
            if error_type in self._tool_errors:
                # A tool's own failure is a completed call with an error result (spec: failed is for
                # JSON-RPC errors only).
                task.update(status="completed", result=tool_error_result(f"{error_type}: {message}"))
            else:
                task.update(status="failed", error={"code": -32603, "message": f"{error_type}: {message}"})
        return task


def _declares_tasks(ctx: ServerRequestContext[Any, Any]) -> bool:
    capabilities = ctx.session.client_capabilities
    return bool(capabilities and capabilities.extensions and TASKS_EXTENSION in capabilities.extensions)


def _require_tasks(ctx: ServerRequestContext[Any, Any]) -> None:
    if not _declares_tasks(ctx):
        raise missing_tasks_capability()


def insufficient_task_scope(needed: Access) -> MCPError:
    """The answer to a task the caller's access token may not see: the guard's message, the scope named in data.
    The check needs the task's item, so it answers inside the JSON-RPC response (the guard's 403 comes before the
    SDK reads anything). Its code is invalid params, as every other tasks/* refusal: the guard's -32001 is the
    2025-11-25 tasks/result "still working, ask again", which a client would retry."""
    return MCPError(INVALID_PARAMS, "Forbidden: insufficient scope", data={"requiredScope": needed.value})


def missing_tasks_capability() -> MCPError:
    """-32021 naming the Tasks extension (SEP-2133): a client that did not declare it asked for a task."""
    return MCPError(
        MISSING_REQUIRED_CLIENT_CAPABILITY,
        "Missing required client capability",
        data={"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}},
    )


def task_caller(ctx: ServerRequestContext[Any, Any]) -> Principal:
    principal = current_caller()
    if principal is None:  # the HTTP guard authenticates every request; reaching here is a wiring bug
        raise MCPError(INVALID_PARAMS, NOT_FOUND)
    return principal


def _is_job_id(task_id: str) -> bool:
    return re.fullmatch(JOB_ID_PATTERN, task_id) is not None


def task_extensions(submissions: JobSubmissions) -> list[Extension]:
    """The endpoint's extensions: Tasks when the table has job-capable tools (and so a jobs service)."""
    if not submissions.tools:
        return []
    return [JobTasks(submissions)]
