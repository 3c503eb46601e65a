"""The MCP tools: submit jobs to the pipeline, read them back, peek the DLQ, or analyse synchronously.

Each tool has a strict pydantic input model (unknown fields rejected, published as its inputSchema);
StrictArguments validates `tools/call` arguments against it before the SDK does, so invalid arguments
are a -32602 that names fields, never values. A caller only ever sees jobs recorded under its user id.
"""

from __future__ import annotations

import base64
import binascii
import json
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import anyio
import anyio.from_thread
import anyio.to_thread
from botocore.exceptions import BotoCoreError, ClientError
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError as SdkToolError
from mcp.server.mcpserver.tools import Tool as SdkTool
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mcp_backend.api_keys import Principal
from mcp_backend.aws import AwsClients
from mcp_backend.config import McpSettings
from mcp_backend.jobs.models import JOB_ID_PATTERN, JobMessage
from mcp_backend.jobs.store import JobStore
from mcp_backend.mcp.guard import principal_of
from mcp_backend.netsafety import UnsafeEndpointUrl, check_endpoint_url
from mcp_backend.observability import logger
from mcp_backend.probes.registry import EndpointRegistry
from mcp_backend.tools.analyze_dataset import AnalyzeInput, AnalyzeOptions
from mcp_backend.tools.dataset_stream import FetchPolicy
from mcp_backend.tools.errors import ToolError
from mcp_backend.tools.registry import TOOLS, ToolContext
from mcp_backend.validation import describe_validation_error

ANALYSIS_TOOL = TOOLS["analyze_dataset"]
SEND_BATCH_LIMIT = 10  # SendMessageBatch entries per call
SEND_RETRY_BASE_SECONDS = 0.05
SEND_BATCH_ATTEMPTS = 3
MAX_BATCH_ITEMS = 100
DLQ_PEEK_ROUNDS = 5
# uuid5 namespace for client call ids: the same (user, callId) always names the same job.
CALL_ID_NAMESPACE = uuid.UUID("6f1c9f1e-5d0e-4c59-9a55-6a3d2c1b0e41")


# ---------------------------------------------------------------- input models
class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)


class SubmitAnalysisInput(AnalyzeInput):
    callId: str | None = Field(
        None,
        min_length=1,
        max_length=128,
        pattern=r"^[A-Za-z0-9._:-]+$",
        description="Client-chosen idempotency key: the same callId returns the same job and enqueues it once.",
    )

    def analysis_input(self) -> dict[str, Any]:
        return self.model_dump(exclude={"callId"}, exclude_defaults=True, mode="json")


class SubmitAnalysesInput(_Strict):
    items: list[SubmitAnalysisInput] = Field(min_length=1, max_length=MAX_BATCH_ITEMS)


class GetJobInput(_Strict):
    job_id: str = Field(pattern=JOB_ID_PATTERN)
    cursor: str | None = Field(None, max_length=512, description="nextCursor from the previous page")


class ListFailedJobsInput(_Strict):
    limit: int = Field(10, ge=1, le=50)


class JobCursor(_Strict):
    """What an opaque cursor carries: the job and the offset into its result's JSON text."""

    job_id: str = Field(alias="j", pattern=JOB_ID_PATTERN)
    offset: int = Field(alias="o", ge=0)

    def encode(self) -> str:
        return base64.urlsafe_b64encode(self.model_dump_json(by_alias=True).encode()).decode().rstrip("=")

    @classmethod
    def decode(cls, text: str) -> JobCursor:
        try:
            raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
            return cls.model_validate_json(raw)
        except (ValueError, binascii.Error, ValidationError):
            raise SdkToolError("InvalidCursor: the cursor is not one this server issued") from None


class RegisterEndpointInput(_Strict):
    url: str = Field(min_length=1, max_length=2048, description="The endpoint's MCP URL (https).")
    name: str = Field(min_length=1, max_length=128, description="A label for the endpoint.")
    auth: str | None = Field(
        None,
        min_length=1,
        max_length=4096,
        description="Optional bearer token the probe sends; stored encrypted, never shown again.",
    )


class ListEndpointsInput(_Strict):
    pass


class EndpointStatusInput(_Strict):
    server_id: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._:-]+$")


INPUT_MODELS: dict[str, type[BaseModel]] = {
    "submit_analysis": SubmitAnalysisInput,
    "submit_analyses": SubmitAnalysesInput,
    "get_job": GetJobInput,
    "list_failed_jobs": ListFailedJobsInput,
    "analyze_dataset": AnalyzeInput,
    "register_endpoint": RegisterEndpointInput,
    "list_endpoints": ListEndpointsInput,
    "endpoint_status": EndpointStatusInput,
}


class StrictArguments:
    """SDK ServerMiddleware: `tools/call` arguments must satisfy the tool's model, else -32602."""

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        if ctx.method == "tools/call" and isinstance(ctx.params, dict):
            name = ctx.params.get("name")
            model = INPUT_MODELS.get(name) if isinstance(name, str) else None
            arguments = ctx.params.get("arguments") or {}
            if model is not None:
                try:
                    model.model_validate(arguments)
                except ValidationError as error:
                    raise MCPError(INVALID_PARAMS, f"{name}: {describe_validation_error(error)}") from None
        return await call_next(ctx)


# ---------------------------------------------------------------- AWS side
class JobBackend:
    """JobTable and the queues, with boto3 clients built on first use (moto in-process or AWS_ENDPOINT_URL)."""

    def __init__(self, settings: McpSettings, client_factory: Callable[[str], Any] | None = None) -> None:
        self.settings = settings
        self.client = AwsClients(client_factory)
        self.fetch_policy = FetchPolicy(
            max_bytes=settings.dataset_max_bytes, allow_private_hosts=settings.dataset_allow_private_hosts
        )

    @property
    def store(self) -> JobStore:
        return JobStore(self.settings.job_table_name, self.client("dynamodb"))

    @property
    def endpoints(self) -> EndpointRegistry:
        return EndpointRegistry(self.settings.monitor_table_name, self.client("dynamodb"))

    # -- probe endpoints --------------------------------------------------------
    def register_endpoint(self, principal: Principal, request: RegisterEndpointInput) -> dict[str, Any]:
        try:
            url = check_endpoint_url(request.url, allow_private_hosts=self.settings.probe_allow_private_hosts)
        except UnsafeEndpointUrl as error:
            raise SdkToolError(f"UnsafeEndpointUrl: {error}") from None
        return self.endpoints.register(principal.user_id, url, request.name, request.auth)

    def endpoint_status(self, principal: Principal, request: EndpointStatusInput) -> dict[str, Any]:
        status = self.endpoints.status(principal.user_id, request.server_id, self.settings.probe_uptime_window_seconds)
        if status is None:  # someone else's endpoint is indistinguishable from none
            raise SdkToolError(f"EndpointNotFound: no endpoint {request.server_id}")
        return status

    # -- submit -----------------------------------------------------------------
    def submit(self, principal: Principal, request: SubmitAnalysisInput) -> dict[str, Any]:
        job = _job_for(principal, request)
        store = self.store
        if not store.create_pending(job):
            existing = store.get(job.job_id)
            if existing is None or existing.get("userId") != principal.user_id:
                raise SdkToolError("JobConflict: this job id is taken")
            if existing.get("enqueuedMessageId"):
                return {"jobId": job.job_id, "status": existing["status"], "repeated": True}
        # A repeat whose first attempt failed to enqueue sends again; the worker runs a job id once anyway.
        try:
            sent = self.client("sqs").send_message(QueueUrl=self.settings.job_queue_url, MessageBody=job.body())
        except (BotoCoreError, ClientError) as error:
            # The SDK's text names the queue; the caller gets a retryable error, the log the type.
            logger.error("job not enqueued", extra={"error_type": type(error).__name__})
            raise SdkToolError("EnqueueFailed: the job queue is unavailable; retry with the same callId") from None
        message_id = sent["MessageId"]
        store.mark_enqueued(job.job_id, job.user_id, message_id)
        return {"jobId": job.job_id, "status": "PENDING"}

    def submit_many(self, principal: Principal, requests: list[SubmitAnalysisInput]) -> list[dict[str, Any]]:
        results: list[dict[str, Any]] = [{} for _ in requests]
        to_send: dict[str, tuple[int, JobMessage]] = {}
        store = self.store
        for index, request in enumerate(requests):
            job = _job_for(principal, request)
            if any(pending.job_id == job.job_id for _, pending in to_send.values()):
                results[index] = {"index": index, "jobId": job.job_id, "status": "PENDING", "repeated": True}
                continue
            if not store.create_pending(job):
                existing = store.get(job.job_id)
                if existing is None or existing.get("userId") != principal.user_id:
                    results[index] = {"index": index, "error": {"type": "JobConflict", "message": "job id is taken"}}
                    continue
                if existing.get("enqueuedMessageId"):
                    results[index] = {
                        "index": index,
                        "jobId": job.job_id,
                        "status": existing["status"],
                        "repeated": True,
                    }
                    continue
            to_send[str(index)] = (index, job)
        sqs = self.client("sqs")
        pending_ids = list(to_send)
        for start in range(0, len(pending_ids), SEND_BATCH_LIMIT):
            chunk = pending_ids[start : start + SEND_BATCH_LIMIT]
            for _attempt in range(SEND_BATCH_ATTEMPTS):
                response = sqs.send_message_batch(
                    QueueUrl=self.settings.job_queue_url,
                    Entries=[{"Id": entry_id, "MessageBody": to_send[entry_id][1].body()} for entry_id in chunk],
                )
                for sent in response.get("Successful", []):
                    index, job = to_send[sent["Id"]]
                    store.mark_enqueued(job.job_id, job.user_id, sent["MessageId"])
                    results[index] = {"index": index, "jobId": job.job_id, "status": "PENDING"}
                failed = response.get("Failed", [])
                # SenderFault entries (a malformed entry) fail the same way again; only service faults retry.
                chunk = [entry["Id"] for entry in failed if not entry.get("SenderFault")]
                for entry in failed:
                    if entry.get("SenderFault"):
                        index, job = to_send[entry["Id"]]
                        results[index] = _enqueue_error(index, job, entry.get("Code", "SenderFault"))
                if not chunk:
                    break
                time.sleep(SEND_RETRY_BASE_SECONDS * 2**_attempt)  # service faults (throttling) need a pause
            for entry_id in chunk:  # still failing after the retries
                index, job = to_send[entry_id]
                results[index] = _enqueue_error(index, job, "RetriesExhausted")
        return results

    # -- read -------------------------------------------------------------------
    def job_page(self, principal: Principal, request: GetJobInput) -> dict[str, Any]:
        item = self.store.get(request.job_id)
        if item is None or item.get("userId") != principal.user_id:
            # Someone else's job is indistinguishable from no job.
            raise SdkToolError(f"JobNotFound: no job {request.job_id}")
        view: dict[str, Any] = {"jobId": request.job_id, "status": item["status"], "tool": item.get("tool")}
        for key in ("createdAt", "updatedAt", "completedAt", "error"):
            if key in item:
                view[key] = item[key]
        cursor = JobCursor.decode(request.cursor) if request.cursor is not None else None
        if cursor is not None and (cursor.job_id != request.job_id or "result" not in item):
            raise SdkToolError("InvalidCursor: the cursor does not belong to this job's result")
        if "result" not in item:
            return view
        text = json.dumps(item["result"], separators=(",", ":"), default=str)
        page = self.settings.job_result_page_bytes
        offset = 0
        if cursor is not None:
            if cursor.offset >= len(text):
                raise SdkToolError("InvalidCursor: the cursor does not belong to this job's result")
            offset = cursor.offset
        if offset == 0 and len(text) <= page:
            view["result"] = item["result"]
            return view
        # Too large for one response: the result's JSON text in pages; concatenate resultChunk in order.
        view["resultChunk"] = text[offset : offset + page]
        view["resultChars"] = len(text)
        if offset + page < len(text):
            view["nextCursor"] = JobCursor(j=request.job_id, o=offset + page).encode()
        return view

    def failed_jobs(self, principal: Principal, limit: int) -> dict[str, Any]:
        """Peek the DLQ: ReceiveMessage with VisibilityTimeout=0 leaves every message visible (nothing is
        deleted or hidden); each is joined with the failure the worker recorded on its last attempt."""
        sqs = self.client("sqs")
        url = self.settings.job_dead_letter_queue_url
        depth = int(
            sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])["Attributes"][
                "ApproximateNumberOfMessages"
            ]
        )
        seen: dict[str, dict[str, Any]] = {}
        for _ in range(DLQ_PEEK_ROUNDS):
            messages = sqs.receive_message(
                QueueUrl=url,
                MaxNumberOfMessages=10,
                VisibilityTimeout=0,
                WaitTimeSeconds=0,
                MessageSystemAttributeNames=["SentTimestamp"],
            ).get("Messages", [])
            fresh = [m for m in messages if m["MessageId"] not in seen]
            for message in fresh:
                seen[message["MessageId"]] = message
            if not fresh or len(seen) >= depth:
                break
        store = self.store
        failed = []
        for message_id, message in seen.items():
            try:
                body = JobMessage.model_validate_json(message["Body"])
            except ValidationError:
                continue  # not a job: recorded under message-<id>, owned by no user
            if body.user_id != principal.user_id:
                continue
            item = store.get(body.job_id) or {}
            failed.append(
                {
                    "jobId": body.job_id,
                    "messageId": message_id,
                    "tool": body.tool,
                    "status": item.get("status", "UNKNOWN"),
                    "error": item.get("error"),
                    # The worker records the DLQ message's id with the error; False means a later run changed it.
                    "errorIsFromThisMessage": item.get("failedMessageId") == message_id,
                    "failedAt": item.get("completedAt"),
                }
            )
        failed.sort(key=lambda job: job.get("failedAt") or "", reverse=True)
        return {"failedJobs": failed[:limit], "deadLetterQueueDepth": depth}


def _job_for(principal: Principal, request: SubmitAnalysisInput) -> JobMessage:
    if request.callId is not None:
        job_id = uuid.uuid5(CALL_ID_NAMESPACE, f"{principal.user_id}\n{request.callId}").hex
    else:
        job_id = uuid.uuid4().hex
    return JobMessage(
        job_id=job_id,
        user_id=principal.user_id,
        tool=ANALYSIS_TOOL.name,
        input=request.analysis_input(),
        submitted_at=datetime.now(UTC),
    )


def _enqueue_error(index: int, job: JobMessage, code: str) -> dict[str, Any]:
    return {
        "index": index,
        "jobId": job.job_id,
        "error": {"type": "EnqueueFailed", "message": f"{code}; submit again with the same callId to retry"},
    }


# ---------------------------------------------------------------- the tools
def _caller(ctx: Context) -> Principal:
    request = ctx.request_context.request
    principal = principal_of(request.scope) if request is not None else None
    if principal is None:  # the HTTP guard authenticates every request; reaching here is a wiring bug
        raise SdkToolError("Unauthorized")
    return principal


def build_tools(backend: JobBackend) -> list[SdkTool]:
    async def submit_analysis(
        ctx: Context,
        dataset_url: str,
        options: AnalyzeOptions | None = None,
        callId: str | None = None,
    ) -> dict[str, Any]:
        request = SubmitAnalysisInput.model_validate(
            {"dataset_url": dataset_url, "options": options or AnalyzeOptions(), "callId": callId}
        )
        return await anyio.to_thread.run_sync(backend.submit, _caller(ctx), request)

    async def submit_analyses(ctx: Context, items: list[SubmitAnalysisInput]) -> dict[str, Any]:
        results = await anyio.to_thread.run_sync(backend.submit_many, _caller(ctx), items)
        return {"results": results}

    async def get_job(ctx: Context, job_id: str, cursor: str | None = None) -> dict[str, Any]:
        request = GetJobInput(job_id=job_id, cursor=cursor)
        return await anyio.to_thread.run_sync(backend.job_page, _caller(ctx), request)

    async def list_failed_jobs(ctx: Context, limit: int = 10) -> dict[str, Any]:
        return await anyio.to_thread.run_sync(backend.failed_jobs, _caller(ctx), limit)

    async def analyze_dataset(ctx: Context, dataset_url: str, options: AnalyzeOptions | None = None) -> dict[str, Any]:
        principal = _caller(ctx)
        # The first event goes out before the download starts.
        await ctx.report_progress(0.0, 1.0, "started")

        def report(fraction: float, message: str) -> None:
            anyio.from_thread.run(ctx.report_progress, min(max(fraction, 0.0), 1.0), 1.0, message)

        arguments = {"dataset_url": dataset_url, "options": (options or AnalyzeOptions()).model_dump()}
        context = ToolContext(user_id=principal.user_id, fetch_policy=backend.fetch_policy, progress=report)
        try:
            result = await anyio.to_thread.run_sync(ANALYSIS_TOOL, arguments, context)
        except ToolError as error:
            raise SdkToolError(f"{error.error_type}: {error.message}") from None
        await ctx.report_progress(1.0, 1.0, "done")
        return result

    async def register_endpoint(ctx: Context, url: str, name: str, auth: str | None = None) -> dict[str, Any]:
        request = RegisterEndpointInput(url=url, name=name, auth=auth)
        return await anyio.to_thread.run_sync(backend.register_endpoint, _caller(ctx), request)

    async def list_endpoints(ctx: Context) -> dict[str, Any]:
        principal = _caller(ctx)
        endpoints = await anyio.to_thread.run_sync(backend.endpoints.list_for, principal.user_id)
        return {"endpoints": endpoints}

    async def endpoint_status(ctx: Context, server_id: str) -> dict[str, Any]:
        request = EndpointStatusInput(server_id=server_id)
        return await anyio.to_thread.run_sync(backend.endpoint_status, _caller(ctx), request)

    descriptions: dict[Callable[..., Any], str] = {
        submit_analysis: "Queue an analyze_dataset job; returns {jobId, status}. Pass callId to make it idempotent.",
        submit_analyses: "Queue many analyze_dataset jobs at once; returns one jobId or error per item, in order.",
        get_job: "Status, result or error of one of your jobs; large results come in pages (pass nextCursor back).",
        list_failed_jobs: "Your jobs sitting in the dead-letter queue, with the error the worker recorded.",
        analyze_dataset: ANALYSIS_TOOL.description + " Runs now and streams progress notifications.",
        register_endpoint: "Register an MCP endpoint to probe every schedule tick; returns its serverId.",
        list_endpoints: "Your registered MCP endpoints (serverId, name, url).",
        endpoint_status: "One endpoint's latest probe, uptime over the window and last schema change.",
    }
    tools = []
    for function, description in descriptions.items():
        tool = SdkTool.from_function(function, description=description)
        # Publish the strict model's schema (additionalProperties: false), the one StrictArguments enforces.
        tool.parameters = INPUT_MODELS[tool.name].model_json_schema()
        tools.append(tool)
    logger.debug("mcp tools built", extra={"tools": [tool.name for tool in tools]})
    return tools
