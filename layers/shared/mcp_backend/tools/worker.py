"""What ToolWorker does with one job-queue record: run the job-capable tool of the tool table that it
names. Every failure raises: only batchItemFailures decide what SQS redelivers, and after maxReceiveCount
receives SQS moves the message to the DLQ."""

from __future__ import annotations

import json
import time
from typing import Any

from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.idempotency.exceptions import IdempotencyAlreadyInProgressError
from aws_lambda_powertools.utilities.parser import parse
from pydantic import ValidationError

from mcp_backend.calllog.models import CallLogEventType, CallLogRecord
from mcp_backend.calllog.writer import CallLogWriter
from mcp_backend.config import WorkerSettings
from mcp_backend.idempotency import RunOnce
from mcp_backend.jobs.errors import (
    JobOwnershipError,
    MalformedJobMessage,
    UnknownTool,
)
from mcp_backend.jobs.models import JobError, JobMessage
from mcp_backend.jobs.store import JobStore
from mcp_backend.observability import logger, tool_invocation, tracer
from mcp_backend.tools.context import ToolContext
from mcp_backend.tools.dataset_stream import FetchPolicy
from mcp_backend.tools.errors import ToolError
from mcp_backend.tools.registry import TOOLS, Tool
from mcp_backend.validation import describe_validation_error


def describe_failure(error: BaseException) -> JobError:
    """Error type and a message safe to store and show: tool and pipeline errors are written to be."""
    if isinstance(error, (ToolError, MalformedJobMessage, JobOwnershipError, UnknownTool)):
        return JobError(type=type(error).__name__, message=str(error)[:1000])
    # Unexpected errors may carry anything in their text; keep the type, drop the text.
    return JobError(type=type(error).__name__, message="unexpected error in the worker; see its logs by jobId")


def parse_job(record: SQSRecord) -> JobMessage:
    try:
        return parse(event=json.loads(record.body), model=JobMessage)
    except json.JSONDecodeError:
        raise MalformedJobMessage("message body is not valid JSON") from None
    except ValidationError as error:
        raise MalformedJobMessage(f"message body is not a job: {describe_validation_error(error)}") from None


class JobWorker:
    def __init__(
        self,
        settings: WorkerSettings,
        store: JobStore,
        tools: dict[str, Tool] | None = None,
        idempotency_client: Any = None,
        call_log: CallLogWriter | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.tools = TOOLS if tools is None else tools
        self.fetch_policy = FetchPolicy(
            max_bytes=settings.dataset_max_bytes,
            allow_loopback_hosts=settings.dataset_allow_loopback_hosts,
        )
        self.call_log = call_log or CallLogWriter(settings.call_log_stream_name)
        # Keyed on the job id (required), validated against the user: a reused id fails.
        self._run_once = RunOnce(
            self._run,
            data_keyword_argument="job",
            key_jmespath="job_id",
            validation_jmespath="user_id",
            table_name=settings.idempotency_table_name,
            ttl_seconds=settings.idempotency_ttl_seconds,
            timeout_seconds=settings.function_timeout_seconds,
            client=idempotency_client,
        )

    def start_invocation(self, lambda_context: Any) -> None:
        self._run_once.start_invocation(lambda_context)

    def finish_invocation(self) -> None:
        """One PutRecords for the batch's call-log records; never raises."""
        self.call_log.flush()

    def process(self, record: SQSRecord) -> dict[str, Any]:
        """Record handler for BatchProcessor: returns on success, raises on any failure."""
        attempt = int(record.attributes.approximate_receive_count)
        final_attempt = attempt >= self.settings.job_max_receive_count
        logger.append_keys(message_id=record.message_id, attempt=attempt)
        try:
            job = parse_job(record)
        except MalformedJobMessage as error:
            logger.warning("malformed job message", extra={"reason": str(error), "final_attempt": final_attempt})
            if final_attempt:
                # No job id to attach it to: the reason is kept under the DLQ message's own id.
                self._record_failure(f"message-{record.message_id}", "unknown", error, record.message_id, "")
            raise
        logger.append_keys(job_id=job.job_id, tool=job.tool)
        logger.set_correlation_id(job.job_id)
        started = time.monotonic()
        try:
            return self._run_once(job=job, attempt=attempt)
        except Exception as error:
            logger.warning(
                "job attempt failed",
                extra={"error_type": type(error).__name__, "final_attempt": final_attempt},
            )
            # A duplicate delivery while another invocation runs the job is not an outcome of the job:
            # marking it FAILED would contradict the run that is about to succeed.
            if not isinstance(error, IdempotencyAlreadyInProgressError):
                if final_attempt:
                    self._record_failure(job.job_id, job.user_id, error, record.message_id, job.tool)
                outcome = CallLogEventType.JOB_FAILED if final_attempt else CallLogEventType.TOOL_ERROR
                self._log_call(job, outcome, started, error_type=type(error).__name__)
            raise
        finally:
            logger.remove_keys(["job_id", "tool", "message_id", "attempt"])

    @tracer.capture_method(capture_response=False)
    def _run(self, job: JobMessage, attempt: int) -> dict[str, Any]:
        tool = self.tools.get(job.tool)
        if tool is None or not tool.runs_as_job:
            raise UnknownTool(f"no tool named {job.tool!r}")
        self.store.mark_running(job, attempt)
        started = time.monotonic()
        with tool_invocation(job.tool):
            result = tool(job.input, ToolContext(user_id=job.user_id, fetch_policy=self.fetch_policy))
        self.store.mark_succeeded(job, result)
        # Inside the run-once body: a redelivered, already completed job logs no second call.
        self._log_call(job, CallLogEventType.TOOL_CALL, started)
        logger.info("job succeeded")
        # Cached by the idempotency layer: keep it small, the result itself lives in JobTable.
        return {"jobId": job.job_id, "status": "SUCCEEDED"}

    def _log_call(self, job: JobMessage, event_type: CallLogEventType, started: float, error_type: str = "") -> None:
        self.call_log.add(
            CallLogRecord(
                event_type=event_type,
                user_id=job.user_id,
                tool_name=job.tool,
                job_id=job.job_id,
                latency_ms=round((time.monotonic() - started) * 1000, 3),
                error_type=error_type or None,
            )
        )

    def _record_failure(self, job_id: str, user_id: str, error: BaseException, message_id: str, tool: str) -> None:
        try:
            self.store.mark_failed(job_id, user_id, describe_failure(error), message_id, tool)
        except JobOwnershipError:
            # Another user's job id: its record stays untouched; the message still goes to the DLQ.
            logger.warning("final failure not recorded: job belongs to another user")
