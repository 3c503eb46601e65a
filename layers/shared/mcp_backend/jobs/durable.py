"""What DurableToolWorker does with one job: the job's run as a Lambda durable execution, in checkpointed steps.

ToolWorker hands a job here (mcp_backend.jobs.handoff) when its tool declares itself long or its input is large.
The execution's input is the job's message; its steps are:

- `start`: the job is taken (RUNNING, with the execution's ARN, so cancel can stop it); a job its owner cancelled
  meanwhile is not run.
- `plan`, then `chunk-0`, `chunk-1`, ...: a tool that runs in chunks (`ChunkedJob`, e.g. analyze_dataset reading
  its dataset in ranged reads) gives a small plan, then one partial aggregate per chunk, each checkpointed. Every
  chunk step records the job's progress and reads its status: a cancelled job stops at its next chunk.
- `result`: the partials are merged and the result is written once, inline or in the result bucket, as the queued
  worker writes every other result (mcp_backend.jobs.results).
- A tool that does not run in chunks runs whole in one `run` step.
- A plan may carry a question for the job's user (a dataset large enough to be confirmed first): the execution then
  waits for the answer in a durable callback, suspended, at no compute cost, up to ANSWER_TIMEOUT_SECONDS. The
  question is on the job, so its task reads `input_required`; tasks/update answers the callback (a confirmation)
  or cancels the job (a refusal), as for a job held before it was queued (mcp_backend.mcp.tasks).

A crashed or timed-out invocation is invoked again by Lambda and replays: every finished step's result comes from
its checkpoint, so no finished chunk is read or counted twice. A step's result is refused before it is
checkpointed when its JSON passes one checkpoint's size limit (CheckpointTooLarge: the job fails, the partial is
never dropped). A job that reaches the durable execution timeout is failed by its own next step, naming the limit.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

from aws_durable_execution_sdk_python import DurableContext, StepError
from aws_durable_execution_sdk_python.config import Duration, StepConfig, WaitForCallbackConfig
from aws_durable_execution_sdk_python.constants import CHECKPOINT_SIZE_LIMIT_BYTES
from aws_durable_execution_sdk_python.exceptions import CallbackError
from aws_durable_execution_sdk_python.retries import RetryDecision

from mcp_backend.jobs.errors import JobCancelled, JobPipelineError, ReportedFailure
from mcp_backend.jobs.models import JobError, JobMessage, JobStatus
from mcp_backend.jobs.results import ResultObjects, stored_outcome
from mcp_backend.jobs.store import JobStore
from mcp_backend.jobs.worker import is_permanent
from mcp_backend.observability import logger

# A step that fails with a transient error (S3 throttling, a dropped connection) is tried this many times in all,
# the delays between tries doubling from STEP_RETRY_DELAY_SECONDS; a permanent one fails the job at once.
STEP_ATTEMPTS = 3
STEP_RETRY_DELAY_SECONDS = 5
# The job fails once less than this is left of the execution timeout before a chunk: a chunk's read and count
# take far less (ranged reads of DURABLE_CHUNK_BYTES), so no chunk starts that the timeout would cut off.
TIMEOUT_MARGIN_SECONDS = 60
# How long a question waits for its user's answer before the job fails (the execution is suspended meanwhile): a
# day, and at most half the execution timeout, so the job fails with its reason before the execution's own end.
ANSWER_TIMEOUT_SECONDS = 24 * 3600


class CheckpointTooLarge(JobPipelineError):
    """A step's result is larger than one durable checkpoint holds: refused at its step (the job fails with this
    reason), never checkpointed in part or dropped."""


class DurableTimeLimit(JobPipelineError):
    """The job reached the durable worker's execution timeout (DurableExecutionTimeoutSeconds)."""


class UnexpectedStepFailure(JobPipelineError):
    """A step raised something no tool or pipeline error describes; its text stays in the worker's logs."""


class ChunkedJob(Protocol):
    """How a long tool runs in checkpointed chunks. Every value returned is JSON and small: it is a checkpoint."""

    def plan(self, arguments: dict[str, Any], context: Any) -> dict[str, Any]:
        """What the chunks need to know (sizes, format, the first chunk's cursor under "start")."""
        ...

    def chunk(
        self, arguments: dict[str, Any], plan: dict[str, Any], cursor: dict[str, Any], context: Any
    ) -> dict[str, Any]:
        """One chunk's partial aggregate ("partial"), the next chunk's cursor ("next", None after the last) and
        the share of the work done ("fraction")."""
        ...

    def merge(self, arguments: dict[str, Any], plan: dict[str, Any], partials: list[Any]) -> dict[str, Any]:
        """The job's result from the chunks' partials, in order."""
        ...


class DurableTool(Protocol):
    """A job-capable tool as the durable worker runs it (mcp_backend.tools.table.Tool)."""

    @property
    def name(self) -> str: ...
    @property
    def runs_as_job(self) -> bool: ...
    @property
    def chunked(self) -> ChunkedJob | None: ...
    def __call__(self, arguments: dict[str, Any], context: Any) -> dict[str, Any]: ...


class ToolRuntime(Protocol):
    def context_for(self, tool: Any, user_id: str, *, cancelled: Callable[[], bool] | None = None) -> Any: ...


@dataclass(frozen=True)
class DurableLimits:
    """The durable worker's bounds: the execution timeout (the template's DurableExecutionTimeoutSeconds, also
    the function's DurableConfig) and one result's size cap."""

    execution_timeout_seconds: int
    result_max_bytes: int


def checkpointed(name: str, value: Any) -> Any:
    """`value` as a step may return it: its JSON within one checkpoint's size limit, or CheckpointTooLarge."""
    size = len(json.dumps(value, separators=(",", ":")).encode())
    if size > CHECKPOINT_SIZE_LIMIT_BYTES:
        raise CheckpointTooLarge(
            f"step {name} produced {size} bytes, over the {CHECKPOINT_SIZE_LIMIT_BYTES}-byte limit of one durable "
            "checkpoint; use smaller chunks"
        )
    return value


def _retry(error: Exception, attempt: int) -> RetryDecision:
    """Transient failures, and unexpected ones (as the queued worker retries them), are tried again with growing
    delays (the execution suspends meanwhile: no compute); permanent ones, and any past STEP_ATTEMPTS, fail the
    step."""
    permanent = is_permanent(error) or (
        isinstance(error, JobPipelineError) and not isinstance(error, UnexpectedStepFailure)
    )
    if attempt >= STEP_ATTEMPTS or permanent:
        return RetryDecision.no_retry()
    return RetryDecision.retry(Duration.from_seconds(STEP_RETRY_DELAY_SECONDS * 2 ** (attempt - 1)))


STEP_CONFIG = StepConfig(retry_strategy=_retry)


def guarded(name: str, function: Callable[[], Any]) -> Callable[[Any], Any]:
    """The step `name` running `function`: its result size-checked (checkpointed)."""
    return partial(_safe, function, name)


def _safe(function: Callable[[], Any], name: str, _step: Any = None) -> Any:
    """The step body, its result size-checked; an error no tool or pipeline error describes is logged here and
    replaced by one whose text is safe to store on the job (its checkpoint keeps the message)."""
    try:
        return checkpointed(name, function())
    except (ReportedFailure, JobPipelineError):
        raise
    except Exception:  # noqa: BLE001 - logged here, replaced by a reason safe to store
        logger.exception("durable step failed", extra={"step": name})
        raise UnexpectedStepFailure("unexpected error in the durable worker; see its logs by jobId") from None


class DurableJobs:
    """The durable worker: one job per durable execution, named by the job id."""

    def __init__(
        self,
        store: JobStore,
        tools: Mapping[str, DurableTool],
        services: ToolRuntime,
        limits: DurableLimits,
        results: ResultObjects | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.tools = tools
        self.services = services
        self.limits = limits
        self.results = results
        self._clock = clock

    def run(self, event: dict[str, Any], context: DurableContext) -> dict[str, Any]:
        """The durable handler's body: the job's steps, replayed from their checkpoints after a crash."""
        job = JobMessage.model_validate(event)
        logger.append_keys(job_id=job.job_id, tool=job.tool, correlation_id=job.job_id)
        arn = context.execution_context.durable_execution_arn
        started = context.step(guarded("start", partial(self._start, job, arn)), name="start", config=STEP_CONFIG)
        if started["status"] != JobStatus.RUNNING:
            return {"jobId": job.job_id, "status": started["status"]}
        try:
            outcome = self._run_steps(job, context, float(started["startedAt"]))
        except StepError as error:
            reason = JobError(type=error.error_type.rpartition(".")[2], message=(error.message or "")[:1000])
            return context.step(lambda _: self._fail(job, reason, arn), name="fail")
        except CallbackError:
            waited = self._answer_timeout()
            reason = JobError(type="InputNotGiven", message=f"the question was not answered within {waited} s")
            return context.step(lambda _: self._fail(job, reason, arn), name="fail")
        return outcome

    # -- steps ------------------------------------------------------------------
    def _start(self, job: JobMessage, arn: str) -> dict[str, Any]:
        """Take the job for this execution; a job cancelled before it started (or finished) is left as it is."""
        status = self.store.start_durable(job, arn)
        return {"status": status, "startedAt": self._clock()}

    def _run_steps(self, job: JobMessage, context: DurableContext, started_at: float) -> dict[str, Any]:
        tool = self.tools.get(job.tool)
        if tool is None or not tool.runs_as_job:
            raise StepError(f"no job-capable tool named {job.tool!r}", error_type="UnknownTool")
        chunked = tool.chunked
        if chunked is None:
            whole = partial(self._whole, job, tool)
            result = context.step(guarded("run", whole), name="run", config=STEP_CONFIG)
            stored = partial(self._store_result, job, result)
            return context.step(guarded("result", stored), name="result", config=STEP_CONFIG)
        planned = partial(chunked.plan, job.input, self._context(job, tool))
        plan = context.step(guarded("plan", planned), name="plan", config=STEP_CONFIG)
        if plan.get("question"):
            self._ask(job, str(plan["question"]), context)
        partials: list[Any] = []
        cursor: dict[str, Any] | None = plan["start"]
        index = 0
        while cursor is not None:
            name = f"chunk-{index}"
            step = partial(self._chunk, job, tool, chunked, plan, cursor, index, started_at)
            done = context.step(guarded(name, step), name=name, config=STEP_CONFIG)
            if done.get("cancelled"):
                logger.info("job cancelled by its owner; stopped before a chunk")
                return {"jobId": job.job_id, "status": JobStatus.CANCELLED.value}
            partials.append(done["partial"])
            cursor = done["next"]
            index += 1
        merged = partial(self._store_merged, job, chunked, plan, partials)
        return context.step(guarded("result", merged), name="result", config=STEP_CONFIG)

    def _chunk(
        self,
        job: JobMessage,
        tool: DurableTool,
        chunked: ChunkedJob,
        plan: dict[str, Any],
        cursor: dict[str, Any],
        index: int,
        started_at: float,
    ) -> dict[str, Any]:
        if self.store.is_cancelled(job.job_id):
            return {"cancelled": True}
        left = started_at + self.limits.execution_timeout_seconds - self._clock()
        if left < TIMEOUT_MARGIN_SECONDS:
            raise DurableTimeLimit(
                f"the job reached the durable worker's {self.limits.execution_timeout_seconds} s execution timeout "
                f"(DurableExecutionTimeoutSeconds) after {index} chunks"
            )
        done = chunked.chunk(job.input, plan, cursor, self._context(job, tool))
        fraction = float(done.get("fraction", 0.0))
        self.store.record_progress(job, fraction, f"chunk {index + 1} done ({fraction:.0%})")
        return {"partial": done["partial"], "next": done.get("next")}

    def _whole(self, job: JobMessage, tool: DurableTool) -> dict[str, Any]:
        return tool(job.input, self._context(job, tool))

    def _store_merged(
        self, job: JobMessage, chunked: ChunkedJob, plan: dict[str, Any], partials: list[Any]
    ) -> dict[str, Any]:
        return self._store_result(job, chunked.merge(job.input, plan, partials))

    def _store_result(self, job: JobMessage, result: dict[str, Any]) -> dict[str, Any]:
        """The result, written once (a replay reads this step's checkpoint); a job cancelled meanwhile keeps no
        result."""
        outcome = stored_outcome(job, result, self.limits.result_max_bytes, self.results)
        try:
            self.store.mark_succeeded(job, result_text=outcome.result_text, result_key=outcome.result_key)
        except JobCancelled:
            return {"jobId": job.job_id, "status": JobStatus.CANCELLED.value}
        logger.info("durable job succeeded")
        return outcome.summary()

    def _fail(self, job: JobMessage, reason: JobError, arn: str) -> dict[str, Any]:
        """The job is FAILED with the step's reason, recorded with the execution's ARN where a queued job records its
        DLQ message; the execution itself succeeds (its job has ended). A job its owner cancelled stays CANCELLED."""
        if self.store.is_cancelled(job.job_id):
            return {"jobId": job.job_id, "status": JobStatus.CANCELLED.value}
        self.store.mark_failed(job.job_id, job.user_id, reason, arn, job.tool)
        logger.warning("durable job failed", extra={"error_type": reason.type})
        return {"jobId": job.job_id, "status": JobStatus.FAILED.value}

    def _ask(self, job: JobMessage, question: str, context: DurableContext) -> None:
        """Wait for the user's answer to `question`: the callback's id and the question go on the job (its task
        reads input_required), then the execution suspends until tasks/update answers it."""

        def publish(callback_id: str, _context: Any) -> None:
            self.store.await_answer(job, question, callback_id)

        config = WaitForCallbackConfig(timeout=Duration.from_seconds(self._answer_timeout()))
        context.wait_for_callback(publish, name="answer", config=config)

    def _answer_timeout(self) -> int:
        return max(1, min(ANSWER_TIMEOUT_SECONDS, self.limits.execution_timeout_seconds // 2))

    def _context(self, job: JobMessage, tool: DurableTool) -> Any:
        return self.services.context_for(tool, job.user_id, cancelled=lambda: self.store.is_cancelled(job.job_id))
