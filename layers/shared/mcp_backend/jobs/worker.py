"""What ToolWorker does with one job-queue record: run the job-capable tool that its `jobType` attribute
(or, on a message without one, its body) names. The tool table and the services tools are given are passed in
(mcp_backend.tools: the worker knows a tool only as something it can call with a job's input and a context).

Each job runs once however often its message is delivered: Powertools idempotency keyed on the job id, with
the job item itself as the record (mcp_backend.jobs.run_records), so a run writes JobTable twice: the claim
(RUNNING) and the end (SUCCEEDED with the result).

A job its owner cancelled is not run (the claim refuses it), and a running one stops at the tool's next
checkpoint (ToolContext.checkpoint) that reads the job's status, or at the end's write, which refuses a
cancelled job; either way the message is deleted, the job stays CANCELLED and no result is recorded.
Checkpoints read the status at most once per CANCELLATION_READ_INTERVAL_SECONDS of a run (CancellationReads).
A result larger than a JobTable item holds goes to the job-result bucket
(mcp_backend.jobs.results).

Each run's tool is called in a forked child process (mcp_backend.jobs.apart): a run that exhausts the
function's memory is killed alone and fails its job with `ToolOutOfMemory`, a permanent failure.

A permanent failure (a `ReportedFailure`, such as a tool's typed error, that is not transient, a malformed
message, an unknown jobType, a result too large to store) is known at once: the job is marked FAILED with the
reason, the message is sent to the DLQ with the reason as message attributes, and the record is reported processed,
so SQS deletes it and no retry repeats what cannot change. Every other failure raises: only
batchItemFailures decide what
SQS redelivers, and after maxReceiveCount receives SQS moves the message to the DLQ.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from typing import Any, Protocol

from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.parser import parse
from pydantic import ValidationError

from mcp_backend.calllog.models import CallLogEventType, CallLogRecord
from mcp_backend.calllog.writer import CallLogWriter
from mcp_backend.config import WorkerSettings
from mcp_backend.idempotency import (
    IdempotencyAlreadyInProgressError,
    IdempotencyPersistenceLayerError,
    IdempotencyValidationError,
    RunOnce,
)
from mcp_backend.jobs.apart import run_apart
from mcp_backend.jobs.errors import (
    JobCancelled,
    JobOwnershipError,
    JobPayloadMismatch,
    MalformedJobMessage,
    ReportedFailure,
    ResultTooLarge,
    UnknownTool,
    WorkerTimeLimit,
)
from mcp_backend.jobs.handoff import DurableStarts
from mcp_backend.jobs.models import JobError, JobMessage, JobOutcome, JobRun, JobStatus
from mcp_backend.jobs.queue import JobQueueMessages, job_type_of
from mcp_backend.jobs.results import ResultObjects, stored_outcome
from mcp_backend.jobs.run_records import RUN_KEY_JMESPATH, RUN_PAYLOAD_JMESPATH, JobRunRecords
from mcp_backend.jobs.store import JOB_RETENTION_SECONDS, JobStore
from mcp_backend.observability import logger, tool_runs
from mcp_backend.tracing.propagation import sqs_record_context
from mcp_backend.tracing.spans import annotate, span
from mcp_backend.tracing.state import enabled as tracing_enabled
from mcp_backend.validation import describe_validation_error


class JobTool(Protocol):
    """A job-capable tool as the worker runs it (mcp_backend.tools.table.Tool)."""

    @property
    def name(self) -> str: ...
    @property
    def runs_as_job(self) -> bool: ...
    @property
    def long_running(self) -> bool: ...
    def input_size(self, arguments: dict[str, Any], context: Any) -> int | None: ...
    def __call__(self, arguments: dict[str, Any], context: Any) -> dict[str, Any]: ...


class ToolRuntime(Protocol):
    """What a tool is given when it runs (mcp_backend.tools.services.ToolServices)."""

    def context_for(self, tool: Any, user_id: str, *, cancelled: Callable[[], bool] | None = None) -> Any: ...
    def require(self, tools: Iterable[Any], function: str) -> None: ...


RECORD_LOG_KEYS = ["message_id", "attempt", "job_id", "tool", "correlation_id"]
# How often a run's checkpoints may read its job's status. The claim that starts a run refuses a cancelled
# job, and the end's write refuses one too, so a read only stops a cancelled run sooner: a run shorter than
# this reads nothing (each read is a DynamoDB GetItem and a few ms of the record's CPU, which the records of a
# batch do not overlap), a longer one reads at most once per interval however often its tool checkpoints.
CANCELLATION_READ_INTERVAL_SECONDS = 1.0
# A run stops at a checkpoint once less than this share of the function's timeout is left (at least 5 s): time to
# record its failure, which names the limit, before Lambda ends the invocation.
TIME_LIMIT_MARGIN_SHARE = 0.1


class CancellationReads:
    """A run's cancellation check (ToolContext.cancelled): the job's status read at most once per `interval`
    seconds, the first interval counted from the claim, which found the job not cancelled. Once a read finds
    it cancelled, every later check answers so without reading. One per run, used by the run's thread only."""

    def __init__(self, read: Callable[[], bool], interval: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._read = read
        self._interval = interval
        self._clock = clock
        self._last_read = clock()
        self._cancelled = False

    def __call__(self) -> bool:
        if not self._cancelled and self._clock() - self._last_read >= self._interval:
            self._cancelled = self._read()
            self._last_read = self._clock()
        return self._cancelled


class TimeLimit:
    """A run's checkpoint check (ToolContext.cancelled) that first stops the run near the invocation's end:
    WorkerTimeLimit, naming the limit, while there is time left to record it; then the cancellation check."""

    def __init__(self, cancelled: Callable[[], bool], remaining_ms: Callable[[], int], timeout_seconds: int) -> None:
        self._cancelled = cancelled
        self._remaining_ms = remaining_ms
        self._timeout_seconds = timeout_seconds
        self._margin_ms = max(5000, int(timeout_seconds * 1000 * TIME_LIMIT_MARGIN_SHARE))

    def __call__(self) -> bool:
        if self._remaining_ms() < self._margin_ms:
            raise WorkerTimeLimit(
                f"the job did not finish within ToolWorker's {self._timeout_seconds} s timeout (WorkerTimeout; "
                "Lambda's limit is 900 s); longer jobs need the durable worker (DurableWorker)"
            )
        return self._cancelled()


def is_permanent(error: BaseException) -> bool:
    """A failure that the same message would hit again on every receive."""
    if isinstance(error, ReportedFailure):
        return not error.transient
    return isinstance(error, (MalformedJobMessage, UnknownTool, ResultTooLarge, JobPayloadMismatch))


def describe_failure(error: BaseException) -> JobError:
    """Error type and a message safe to store and show: tool and pipeline errors are written to be."""
    if isinstance(
        error,
        (ReportedFailure, MalformedJobMessage, JobOwnershipError, UnknownTool, ResultTooLarge, JobPayloadMismatch),
    ):
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


PROCESS_SPAN = "process JobQueue"


class JobWorker:
    def __init__(
        self,
        settings: WorkerSettings,
        store: JobStore,
        tools: Mapping[str, JobTool],
        services: ToolRuntime,
        call_log: CallLogWriter | None = None,
        queue: JobQueueMessages | None = None,
        results: ResultObjects | None = None,
        clock: Callable[[], float] = time.monotonic,
        durable: DurableStarts | None = None,
    ) -> None:
        self.settings = settings
        self._clock = clock  # when checkpoints may read a job's status (CancellationReads)
        self.store = store
        # Without a result bucket a result too large for JobTable fails the job (ResultTooLarge).
        if results is None and settings.job_result_bucket_name:
            results = ResultObjects(settings.job_result_bucket_name)
        self.results = results
        self.tools = tools
        # Built as the endpoint builds them; a job tool declaring a service this function lacks stops the start.
        self.services = services
        self.services.require([tool for tool in tools.values() if tool.runs_as_job], "ToolWorker")
        self.call_log = call_log or CallLogWriter(settings.call_log_stream_name)
        # Keyed on the job id (required), validated against the job's fingerprint (owner, tool, input): a
        # reused id with another payload is refused. The record is the job item (JobRunRecords); the TTL is
        # JobTable's own (expiresAt), so Powertools' is unused.
        self._run_once = RunOnce(
            self._run,
            data_keyword_argument="run",
            key_jmespath=RUN_KEY_JMESPATH,
            validation_jmespath=RUN_PAYLOAD_JMESPATH,
            ttl_seconds=JOB_RETENTION_SECONDS,
            timeout_seconds=settings.function_timeout_seconds,
            persistence=lambda: JobRunRecords(store),
        )
        self.queue = queue or JobQueueMessages(settings.job_dead_letter_queue_url)
        # Off (no DURABLE_WORKER_ARN): every job runs here, bounded by the function's timeout.
        if durable is None and settings.durable_worker_arn:
            durable = DurableStarts.from_settings(settings)
        self.durable = durable
        self._invocation: Any = None  # the Lambda context of the invocation under way (its time left)
        # Each tool run in a process of its own (mcp_backend.jobs.apart): an out-of-memory run ends alone.
        self._call: Callable[[Callable[[], dict[str, Any]]], dict[str, Any]] = (
            partial(run_apart, seconds=settings.function_timeout_seconds) if settings.tool_runs_apart else _call_here
        )

    def start_invocation(self, lambda_context: Any) -> None:
        self._run_once.start_invocation(lambda_context)
        self._invocation = lambda_context

    def _remaining_ms(self) -> int:
        if self._invocation is None:
            return self.settings.function_timeout_seconds * 1000
        return int(self._invocation.get_remaining_time_in_millis())

    def finish_invocation(self) -> None:
        """One PutRecords for the batch's call-log records; never raises."""
        self.call_log.flush()

    def process(self, record: SQSRecord) -> dict[str, Any]:
        """Record handler: returns on success or on a permanent failure it has dead-lettered, raises on
        any other failure. Runs in a record thread: log keys are this record's own (context variables)."""
        attempt = int(record.attributes.approximate_receive_count)
        logger.thread_safe_append_keys(message_id=record.message_id, attempt=attempt)
        try:
            # The consumer span: a child of the sender's (the message's trace context), so one trace holds both.
            with span(
                PROCESS_SPAN,
                kind="consumer",
                parent=sqs_record_context(record.raw_event),
                attributes=_process_attributes(record, attempt),
            ):
                return self._process(record, attempt)
        finally:
            logger.thread_safe_remove_keys(RECORD_LOG_KEYS)

    def _process(self, record: SQSRecord, attempt: int) -> dict[str, Any]:
        final_attempt = attempt >= self.settings.job_max_receive_count
        started = time.monotonic()
        job: JobMessage | None = None
        try:
            job = self._route(record)
            logger.thread_safe_append_keys(job_id=job.job_id, tool=job.tool, correlation_id=job.job_id)
            annotate({"job.id": job.job_id, "gen_ai.tool.name": job.tool})
            if self._goes_durable(job):
                return self._hand_off(job)
            outcome = JobOutcome.model_validate(self._run_with_causes(JobRun(job=job, attempt=attempt)))
            return outcome.summary()
        except IdempotencyAlreadyInProgressError:
            # A duplicate delivery while another invocation runs the job is not an outcome of the job:
            # marking it FAILED would contradict the run that is about to succeed.
            logger.warning("job is running in another invocation; retried later")
            raise
        except JobCancelled:
            # Not a failure: the owner cancelled it while it ran and the end was not written; the message is
            # deleted (the record succeeds) and nothing retries the job.
            logger.info("job cancelled by its owner; not completed")
            return {"jobId": job.job_id if job else None, "status": JobStatus.CANCELLED.value}
        except Exception as error:  # noqa: BLE001 - _failed raises it again unless it dead-lettered it
            return self._failed(record, job or _job_or_none(record), error, final_attempt, started)

    def _failed(
        self, record: SQSRecord, job: JobMessage | None, error: Exception, final_attempt: bool, started: float
    ) -> dict[str, Any]:
        """A failed attempt: a permanent failure is recorded and dead-lettered here (the record succeeds);
        any other is re-raised, recorded on the job first when this is the message's last receive."""
        permanent = is_permanent(error)
        logger.warning(
            "job attempt failed",
            extra={"error_type": type(error).__name__, "permanent": permanent, "final_attempt": final_attempt},
        )
        # Another payload under an existing job's id: that job is not this message's to record on.
        recordable = not isinstance(error, JobPayloadMismatch)
        if permanent:
            # Raises if the DLQ refuses the message: the record then fails and stays on JobQueue.
            failed_message_id = self.queue.dead_letter(record, describe_failure(error))
            if recordable:
                self._record_failure(record, job, error, failed_message_id)
            if job is not None:
                self._log_call(job, CallLogEventType.JOB_FAILED, started, error_type=type(error).__name__)
            logger.info("permanent failure: message sent to the DLQ")
            return {"jobId": job.job_id if job else None, "status": "FAILED"}
        if final_attempt:
            # SQS moves the message itself after this receive; it keeps its MessageId there.
            self._record_failure(record, job, error, record.message_id)
        if job is not None:
            outcome = CallLogEventType.JOB_FAILED if final_attempt else CallLogEventType.TOOL_ERROR
            self._log_call(job, outcome, started, error_type=type(error).__name__)
        raise error

    def _route(self, record: SQSRecord) -> JobMessage:
        """The job, routed on its jobType attribute before the body is read; a message without the
        attribute is routed on the body's tool."""
        job_type = job_type_of(record)
        if job_type is not None and not self._runs_as_job(job_type):
            raise UnknownTool(f"no job-capable tool named {job_type[:64]!r} (jobType attribute)")
        job = parse_job(record)
        if job_type is not None and job_type != job.tool:
            raise MalformedJobMessage(
                f"jobType attribute {job_type[:64]!r} does not match the body's tool {job.tool!r}"
            )
        return job

    def _goes_durable(self, job: JobMessage) -> bool:
        tool = self.tools.get(job.tool)
        if self.durable is None or tool is None:
            return False
        return self.durable.wants(tool, job.input, self.services.context_for(tool, job.user_id))

    def _hand_off(self, job: JobMessage) -> dict[str, Any]:
        """Start the job's durable execution, once: a job that already records one (a redelivered message) starts
        nothing. The record succeeds; the durable worker runs and ends the job."""
        item = self.store.get(job.job_id)
        if item is not None and item.get("durableExecutionArn"):
            logger.info("job already handed to the durable worker")
        else:
            self.store.record_handoff(job, self.durable.start(job) if self.durable else "")
            logger.info("job handed to the durable worker")
        return {"jobId": job.job_id, "status": JobStatus.PENDING.value, "durable": True}

    def _runs_as_job(self, name: str) -> bool:
        tool = self.tools.get(name)
        return tool is not None and tool.runs_as_job

    def _run_with_causes(self, run: JobRun) -> dict[str, Any]:
        """The run-once call, with what its persistence layer refused raised as the job pipeline's own errors:
        another payload under this job's id, a cancellation or a result too large met by the end's write."""
        try:
            return dict(self._run_once(run=run))
        except IdempotencyValidationError:
            raise JobPayloadMismatch(
                "a job with this id was submitted with another payload; this message is not run"
            ) from None
        except IdempotencyPersistenceLayerError as error:
            if isinstance(error.__cause__, (JobCancelled, ResultTooLarge, JobOwnershipError)):
                raise error.__cause__ from None
            raise

    def _run(self, run: JobRun) -> dict[str, Any]:
        """The job's body, once per job: the claim (RUNNING) before it and the end (SUCCEEDED) after it are
        the run-once record's writes (JobRunRecords)."""
        job = run.job
        tool = self.tools.get(job.tool)
        if tool is None or not tool.runs_as_job:
            raise UnknownTool(f"no job-capable tool named {job.tool!r}")
        started = time.monotonic()
        # Called right after the claim (Powertools runs the body once the claim's write succeeded).
        cancelled = CancellationReads(
            partial(self.store.is_cancelled, job.job_id), CANCELLATION_READ_INTERVAL_SECONDS, self._clock
        )
        limited = TimeLimit(cancelled, self._remaining_ms, self.settings.function_timeout_seconds)
        context = self.services.context_for(tool, job.user_id, cancelled=limited)
        try:
            with tool_runs.run(job.tool), span(f"execute_tool {job.tool}", attributes=_tool_attributes(job)):
                result = self._call(partial(tool, job.input, context))
        except JobCancelled:
            logger.info("job cancelled by its owner; not completed")
            return JobOutcome(job_id=job.job_id, status=JobStatus.CANCELLED).model_dump()
        outcome = stored_outcome(job, result, self.settings.job_result_max_bytes, self.results)
        # Inside the run-once body: a redelivered, already completed job logs no second call.
        self._log_call(job, CallLogEventType.TOOL_CALL, started)
        logger.info("job succeeded")
        return outcome.model_dump()

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

    def _record_failure(
        self, record: SQSRecord, job: JobMessage | None, error: BaseException, failed_message_id: str
    ) -> None:
        """The job is FAILED with the reason, keyed by the DLQ message's id so list_failed_jobs can match
        the two; a message that is not a job at all is recorded under `message-<MessageId>`."""
        if job is None:
            job_id, user_id, tool = f"message-{record.message_id}", "unknown", ""
        else:
            job_id, user_id, tool = job.job_id, job.user_id, job.tool
        try:
            self.store.mark_failed(job_id, user_id, describe_failure(error), failed_message_id, tool)
        except JobOwnershipError:
            # Another user's job id: its record stays untouched; the message still goes to the DLQ.
            logger.warning("failure not recorded: job belongs to another user")


def _process_attributes(record: SQSRecord, attempt: int) -> dict[str, Any]:
    """The consumer span's attributes (messaging conventions), with the time the message waited in the queue; none
    with tracing off (nothing is computed for a span that is not recorded)."""
    if not tracing_enabled():
        return {}
    attributes: dict[str, Any] = {
        "messaging.system": "aws_sqs",
        "messaging.operation.type": "process",
        "messaging.destination.name": "JobQueue",
        "messaging.message.id": record.message_id,
        "job.attempt": attempt,
    }
    sent = (record.raw_event.get("attributes") or {}).get("SentTimestamp")
    if isinstance(sent, str) and sent.isdigit():
        attributes["job.queue_wait_ms"] = max(0, int(time.time() * 1000) - int(sent))
    return attributes


def _tool_attributes(job: JobMessage) -> dict[str, Any]:
    return {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": job.tool, "job.id": job.job_id}


def _call_here(call: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    return call()


def _job_or_none(record: SQSRecord) -> JobMessage | None:
    """The job a failed record names, when its body is one (to record the failure on it)."""
    try:
        return parse_job(record)
    except MalformedJobMessage:
        return None
