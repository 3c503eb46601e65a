"""The 2025-11-25 task-augmented tool calls, served beside the Tasks extension on the same JobTable tasks.

A 2025-11-25 client learns from `initialize` that the server takes task-augmented `tools/call` and `tasks/cancel`
(`capabilities.tasks`), and from `tools/list` which tools take a task (`execution.taskSupport`). A `tools/call`
with `params.task` of a job-capable tool is submitted through the one submission policy (`JobSubmissions`, as
submit_<tool> and the extension's calls are) and answered at once with a CreateTaskResult; `tasks/get`,
`tasks/result` and `tasks/cancel` read and write the job's JobTable item, so any Lambda environment answers for
any task. A task belongs to its principal: another principal's id is "not found".
`tasks/list` is not served: JobTable has no index of a principal's jobs, and a scan is neither bounded nor cheap.
The spec has `tasks/result` block until its task is terminal; a Lambda request cannot outlive the function's
timeout, and each waiting request holds an environment. So it waits a few seconds (TASK_RESULT_WAIT_SECONDS), in
one of its principal's calls-in-flight slots (the guard takes it, as for a synchronous network call), and a task
still working then is answered with the SDKs' "request timed out" error carrying the task: the client polls
`tasks/get` and asks again. While it waits, its answer is an event stream (mcp/response_modes.py) and each status
change it sees is sent on it as `notifications/tasks/status` before the result.
The SDK's 2025-11-25 surface leaves `tasks/*` out and sieves a `tools/call` result to a CallToolResult, so the
task's answers are made here (the SDK's middleware contract: a middleware that answers owns its result).
Specification: https://modelcontextprotocol.io/specification/2025-11-25/basic/utilities/tasks
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import anyio
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.extension import MethodBinding
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    CreateTaskResult,
    ServerTasksCapability,
    ServerTasksRequestsCapability,
    Task,
    TasksCallCapability,
    TasksCancelCapability,
    TaskStatusNotification,
    TaskStatusNotificationParams,
    TasksToolsCapability,
)
from mcp_types.jsonrpc import REQUEST_TIMEOUT

from mcp_backend.jobs.errors import JobAlreadyFinished
from mcp_backend.mcp.bindings import REPORTED_ERRORS
from mcp_backend.mcp.tasks import JobTasks, TaskParams, task_caller
from mcp_backend.mcp.worker_threads import run_in_worker_thread
from mcp_backend.tools.errors import InvalidToolInput
from mcp_backend.tools.table import Tool

LEGACY_TASK_ERA = frozenset({"2025-11-25"})
RELATED_TASK = "io.modelcontextprotocol/related-task"
# A tasks/result that ends before its task does is the SDKs' "request timed out" (-32001), its data the working
# task: the client polls tasks/get and asks again.
TASK_STILL_WORKING = REQUEST_TIMEOUT
TERMINAL = frozenset({"completed", "failed", "cancelled"})
# The methods whose answer waits for a task: each request holds a calls-in-flight slot while it runs. The Tasks
# extension (mcp/tasks.py) has none: its tasks/get, tasks/cancel and tasks/update answer at once.
WAITING_METHODS = frozenset({"tasks/result"})


def tasks_capability() -> dict[str, Any]:
    """The server's `capabilities.tasks`: task-augmented tools/call and tasks/cancel; no tasks/list."""
    capability = ServerTasksCapability(
        cancel=TasksCancelCapability(),
        requests=ServerTasksRequestsCapability(tools=TasksToolsCapability(call=TasksCallCapability())),
    )
    return capability.model_dump(by_alias=True, mode="json", exclude_none=True)


class LegacyJobTasks:
    """SDK ServerMiddleware (initialize's capability, task-augmented tools/call) and the tasks/* methods of the
    2025-11-25 era, over the Tasks extension's view of JobTable."""

    def __init__(self, tasks: JobTasks, result_wait_seconds: float) -> None:
        self.tasks = tasks
        self.result_wait_seconds = result_wait_seconds

    def methods(self) -> Sequence[MethodBinding]:
        return (
            MethodBinding("tasks/get", TaskParams, self.get, protocol_versions=LEGACY_TASK_ERA),
            MethodBinding("tasks/result", TaskParams, self.result, protocol_versions=LEGACY_TASK_ERA),
            MethodBinding("tasks/cancel", TaskParams, self.cancel, protocol_versions=LEGACY_TASK_ERA),
        )

    # -- middleware -------------------------------------------------------------
    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        if ctx.method == "initialize":
            answer = await call_next(ctx)
            if isinstance(answer, dict) and answer.get("protocolVersion") in LEGACY_TASK_ERA:
                answer["capabilities"] = {**answer.get("capabilities", {}), "tasks": tasks_capability()}
            return answer
        params = ctx.params if isinstance(ctx.params, Mapping) else {}
        if ctx.method != "tools/call" or ctx.protocol_version not in LEGACY_TASK_ERA or params.get("task") is None:
            return await call_next(ctx)
        tool = self.tasks.task_tools.get(str(params.get("name")))
        if tool is None:
            # The spec's answer to a task for a tool whose taskSupport is forbidden.
            raise MCPError(METHOD_NOT_FOUND, f"{params.get('name')}: this tool does not run as a task")
        return await self._create(ctx, tool, dict(params.get("arguments") or {}))

    async def _create(self, ctx: ServerRequestContext[Any, Any], tool: Tool, arguments: dict[str, Any]) -> Any:
        caller = task_caller(ctx)
        try:
            # The one submission policy every door applies: validation, the tool's admission, the tier's quota.
            submitted = await run_in_worker_thread(self.tasks.submissions.submit, caller, tool.name, arguments)
        except InvalidToolInput as error:
            raise MCPError(INVALID_PARAMS, f"{tool.name}: {error}") from None
        except REPORTED_ERRORS as error:
            # Not enqueued: the call's own error result, as submit_<tool> reports it.
            return {"content": [{"type": "text", "text": f"{type(error).__name__}: {error}"}], "isError": True}
        task = await run_in_worker_thread(self.tasks.task, caller, submitted["jobId"])
        return CreateTaskResult(task=legacy_task(task)).model_dump(by_alias=True, mode="json", exclude_none=True)

    # -- tasks/* ----------------------------------------------------------------
    async def get(self, ctx: ServerRequestContext[Any, Any], params: TaskParams) -> dict[str, Any]:
        task = await run_in_worker_thread(self.tasks.task, task_caller(ctx), params.task_id)
        return _task_fields(task)

    async def cancel(self, ctx: ServerRequestContext[Any, Any], params: TaskParams) -> dict[str, Any]:
        caller = task_caller(ctx)
        await run_in_worker_thread(self.tasks.owned, caller, params.task_id)  # not found / expired / scope first
        try:
            await run_in_worker_thread(self.tasks.jobs.cancel, caller.user_id, params.task_id)
        except JobAlreadyFinished:
            raise MCPError(INVALID_PARAMS, "Cannot cancel task: already in a terminal status") from None
        return _task_fields(await run_in_worker_thread(self.tasks.task, caller, params.task_id))

    async def result(self, ctx: ServerRequestContext[Any, Any], params: TaskParams) -> dict[str, Any]:
        """The tool call's own result once the task is terminal, waiting for it at most `result_wait_seconds`."""
        caller = task_caller(ctx)
        task = await run_in_worker_thread(self.tasks.task, caller, params.task_id)
        with anyio.move_on_after(self.result_wait_seconds):
            while task["status"] not in TERMINAL:
                await anyio.sleep(task["pollIntervalMs"] / 1000)
                seen, task = task["status"], await run_in_worker_thread(self.tasks.task, caller, params.task_id)
                if task["status"] != seen:
                    await _send_status(ctx, task)
        related = {RELATED_TASK: {"taskId": params.task_id}}
        if task["status"] == "completed":
            outcome = {key: value for key, value in task["result"].items() if key != "resultType"}
            return {**outcome, "_meta": related}
        if task["status"] == "failed":
            raise MCPError(INTERNAL_ERROR, task["error"]["message"], data=related)
        if task["status"] == "cancelled":
            raise MCPError(INVALID_PARAMS, "Task was cancelled: it has no result", data=related)
        raise MCPError(
            TASK_STILL_WORKING,
            "Task still working: poll tasks/get, then ask for its result again",
            data={"task": legacy_task(task)},
        )


async def _send_status(ctx: ServerRequestContext[Any, Any], task: dict[str, Any]) -> None:
    """`notifications/tasks/status` on the waiting request's own stream."""
    notification = TaskStatusNotification(params=TaskStatusNotificationParams(**dict(legacy_task(task))))
    # The SDK types leave this 2025-11-25 notification out of ServerNotification; the session sends any.
    await ctx.session.send_notification(notification, related_request_id=ctx.request_id)  # type: ignore[arg-type]


def legacy_task(task: dict[str, Any]) -> Task:
    """The 2025-11-25 Task of a task as the extension reads it from JobTable."""
    return Task(
        task_id=task["taskId"],
        status=task["status"],
        status_message=task.get("statusMessage") or None,
        created_at=task["createdAt"],
        last_updated_at=task["lastUpdatedAt"],
        ttl=task["ttlMs"],
        poll_interval=task["pollIntervalMs"],
    )


def _task_fields(task: dict[str, Any]) -> dict[str, Any]:
    return legacy_task(task).model_dump(by_alias=True, mode="json", exclude_none=True)
