"""The jobs service: submit one job or many (SendMessageBatch with retries of the entries SQS reports
failed), page a stored result, and list the caller's failed jobs. A job is recorded once, however many
requests submit it; a repeat of a job still PENDING sends its message again (the worker runs a job once,
keyed on its id), so every answer comes after the job's record and a message for it are stored. The MCP job tools
call it; it knows tools only by name. A caller only ever sees jobs recorded under its user id.
"""

from __future__ import annotations

import base64
import binascii
import json
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mcp_backend.aws import AwsClients, botocore_errors
from mcp_backend.jobs.errors import (
    EnqueueFailed,
    InvalidCursor,
    JobAlreadyFinished,
    JobConflict,
    JobNotFound,
    JobRequestError,
)
from mcp_backend.jobs.models import JOB_ID_PATTERN, TERMINAL_STATUSES, JobMessage, JobStatus
from mcp_backend.jobs.quota_leases import JobAdmission
from mcp_backend.jobs.results import ResultObjects, result_text
from mcp_backend.jobs.store import JobStore
from mcp_backend.observability import count_limit_refusal, logger
from mcp_backend.quotas import JobQuota, QuotaExceeded
from mcp_backend.tracing.spans import annotate, span

SEND_BATCH_LIMIT = 10  # SendMessageBatch entries per call
SEND_RETRY_BASE_SECONDS = 0.05
SEND_BATCH_ATTEMPTS = 3
MAX_BATCH_ITEMS = 100
# uuid5 namespace for client call ids: the same (user, callId) always names the same job.
CALL_ID_NAMESPACE = uuid.UUID("6f1c9f1e-5d0e-4c59-9a55-6a3d2c1b0e41")
# The producer span of a job message (OpenTelemetry messaging conventions); its context rides in the message.
SEND_SPAN = "send JobQueue"
SEND_SPAN_ATTRIBUTES = {
    "messaging.system": "aws_sqs",
    "messaging.operation.type": "send",
    "messaging.destination.name": "JobQueue",
}


@dataclass(frozen=True)
class JobSubmission:
    """One job to submit: the tool, its (validated) input, and the client's optional idempotency key."""

    tool: str
    input: dict[str, Any]
    call_id: str | None = None


@dataclass(frozen=True)
class JobQueues:
    """Where the service keeps jobs: the table, the queue and its dead-letter queue."""

    job_table_name: str
    job_queue_url: str
    job_dead_letter_queue_url: str
    result_page_bytes: int = 256 * 1024
    # The bucket of results too large for a job item ("" when the function has none).
    result_bucket_name: str = ""
    # DurableToolWorker's alias ARN ("" with the durable worker off): a cancel stops its job's durable execution.
    durable_worker_arn: str = ""


class OpaqueCursor(BaseModel):
    """A cursor a caller holds between pages: the model's fields as short-keyed JSON in unpadded base64url. A text
    this server did not issue (or a tampered one) is `InvalidCursor`, never a validation error with its input."""

    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True, populate_by_name=True, defer_build=True)

    def encode(self) -> str:
        return base64.urlsafe_b64encode(self.model_dump_json(by_alias=True).encode()).decode().rstrip("=")

    @classmethod
    def decode(cls, text: str) -> Self:
        try:
            raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
            return cls.model_validate_json(raw)
        except (ValueError, binascii.Error, ValidationError):
            raise InvalidCursor("the cursor is not one this server issued") from None


class JobCursor(OpaqueCursor):
    """What an opaque cursor carries: the job and the offset into its result's JSON text."""

    job_id: str = Field(alias="j", pattern=JOB_ID_PATTERN)
    offset: int = Field(alias="o", ge=0)


class FailedCursor(OpaqueCursor):
    """What a list_failed_jobs cursor carries: the last job of the previous page. The user is the caller's,
    never the cursor's, so a cursor cannot list anyone else's failures."""

    job_id: str = Field(alias="j", min_length=1, max_length=128)
    failed_at: str = Field(alias="f", min_length=1, max_length=64)

    def position(self) -> dict[str, str]:
        return {"jobId": self.job_id, "failedAt": self.failed_at}


class JobsCursor(OpaqueCursor):
    """What a job-listing cursor carries: the last job of the previous page (the user is always the caller's)."""

    job_id: str = Field(alias="j", pattern=JOB_ID_PATTERN)
    created_at: str = Field(alias="c", min_length=1, max_length=64)

    def position(self) -> dict[str, str]:
        return {"jobId": self.job_id, "createdAt": self.created_at}


@dataclass(frozen=True)
class ResultPage:
    """One page of a finished job's result: bytes `page * page_bytes` on of its JSON text, and its whole size."""

    text: str
    page: int
    pages: int
    total_bytes: int


class JobsService:
    def __init__(self, queues: JobQueues, clients: AwsClients | None = None) -> None:
        self.queues = queues
        self._clients = clients or AwsClients()
        # This instance's daily-job leases and recent submissions: the service lives as long as its function.
        self.admission = JobAdmission()

    @property
    def store(self) -> JobStore:
        return JobStore(self.queues.job_table_name, self._clients("dynamodb"))

    # -- submit -----------------------------------------------------------------
    def submit(
        self, user_id: str, submission: JobSubmission, quota: JobQuota, hold_for: str | None = None
    ) -> dict[str, Any]:
        """Submit one job; over the caller's quota, QuotaExceeded and nothing is written. The quota is required:
        no door queues a job outside its caller's tier (mcp_backend.tools.submissions applies it). With
        `hold_for` (a question to its user) the job is recorded PENDING but not queued: `release` queues it once
        the user has answered (a task in `input_required`, mcp_backend.mcp.tasks)."""
        job = _job_for(user_id, submission)
        annotate({"job.id": job.job_id})  # the request's trace is found from the job id (docs/operations.md)
        try:
            answer = self._record(job, quota)
        except QuotaExceeded as refused:
            count_limit_refusal(refused.limit, refused.tier, user_id, refused.resets)
            raise
        if "error" in answer:
            raise JobConflict("this job id is taken")
        held = answer.pop("held", False)
        if answer["status"] != JobStatus.PENDING or held:  # a held job is queued by its release only
            return answer
        if hold_for is not None and not answer.get("repeated"):
            self.store.hold_for_input(job, hold_for)
            return answer
        self._send(job)
        return answer

    def release(self, user_id: str, job_id: str) -> bool:
        """Queue the caller's held job, once: False when it is not held (released already, cancelled, or not
        the caller's)."""
        job = self.store.release_held(job_id, user_id)
        if job is None:
            return self._answer_durable(user_id, job_id)
        self._send(job)
        return True

    def _answer_durable(self, user_id: str, job_id: str) -> bool:
        """A running durable job waiting for its user's confirmation goes on: its callback is completed, once. A
        callback Lambda refuses (it timed out, its execution was stopped) is only logged: the job has ended or
        ends with its own reason."""
        callback_id = self.store.take_answer_callback(job_id, user_id)
        if callback_id is None:
            return False
        try:
            self._clients("lambda").send_durable_execution_callback_success(
                CallbackId=callback_id, Result=json.dumps({"confirm": True}).encode()
            )
        except (botocore_errors.ClientError, botocore_errors.BotoCoreError) as error:
            extra = {"job_id": job_id, "error_type": type(error).__name__}
            logger.warning("durable job's answer not delivered", extra=extra)
            return False
        return True

    def _send(self, job: JobMessage) -> None:
        try:
            with span(SEND_SPAN, kind="producer", attributes={**SEND_SPAN_ATTRIBUTES, "job.id": job.job_id}):
                self._clients("sqs").send_message(
                    QueueUrl=self.queues.job_queue_url, MessageBody=job.body(), MessageAttributes=job.attributes()
                )
        except (botocore_errors.BotoCoreError, botocore_errors.ClientError) as error:
            # The SDK's text names the queue; the caller gets a retryable error, the log the type.
            logger.error("job not enqueued", extra={"error_type": type(error).__name__})
            raise EnqueueFailed("the job queue is unavailable; retry with the same callId") from None

    def submit_many(self, user_id: str, submissions: list[JobSubmission], quota: JobQuota) -> list[dict[str, Any]]:
        """Record every item's job, then send the messages of those still PENDING in batches. An item repeating
        an earlier item's callId is answered as that item was (the same job) when its request is the same, and
        is a JobConflict when it is not, as a repeat in a later call would be."""
        results: list[dict[str, Any]] = [{} for _ in submissions]
        to_send: dict[str, tuple[int, JobMessage, dict[str, Any]]] = {}
        first: dict[str, tuple[int, str]] = {}  # job id -> the first item naming it, and its request's fingerprint
        repeats: list[tuple[int, JobMessage]] = []
        for index, submission in enumerate(submissions):
            job = _job_for(user_id, submission)
            if job.job_id in first:
                repeats.append((index, job))
                continue
            first[job.job_id] = (index, job.fingerprint())
            try:
                answer = self._record(job, quota)
            except QuotaExceeded as refused:  # this item only: the others are still submitted
                count_limit_refusal(refused.limit, refused.tier, user_id, refused.resets)
                results[index] = {"index": index, "error": refused.as_error()}
                continue
            held = answer.pop("held", False)  # a held job is queued by its release only
            if answer.get("status") == JobStatus.PENDING and not held:
                to_send[str(index)] = (index, job, answer)
            else:
                results[index] = {"index": index, **answer}
        self._send_batches(to_send, results)
        for index, job in repeats:
            earlier, fingerprint = first[job.job_id]
            if fingerprint != job.fingerprint():
                conflict = {"type": "JobConflict", "message": "this callId was used for another request"}
                results[index] = {"index": index, "error": conflict}
            else:
                answer = {key: value for key, value in results[earlier].items() if key != "index"}
                results[index] = {"index": index, **answer, **({"repeated": True} if "jobId" in answer else {})}
        return results

    def _send_batches(
        self, to_send: dict[str, tuple[int, JobMessage, dict[str, Any]]], results: list[dict[str, Any]]
    ) -> None:
        sqs = self._clients("sqs")
        pending_ids = list(to_send)
        for start in range(0, len(pending_ids), SEND_BATCH_LIMIT):
            chunk = pending_ids[start : start + SEND_BATCH_LIMIT]
            for _attempt in range(SEND_BATCH_ATTEMPTS):
                batch_attributes = {**SEND_SPAN_ATTRIBUTES, "messaging.batch.message_count": len(chunk)}
                with span(SEND_SPAN, kind="producer", attributes=batch_attributes):
                    response = sqs.send_message_batch(
                        QueueUrl=self.queues.job_queue_url,
                        Entries=[
                            {
                                "Id": entry_id,
                                "MessageBody": to_send[entry_id][1].body(),
                                "MessageAttributes": to_send[entry_id][1].attributes(),
                            }
                            for entry_id in chunk
                        ],
                    )
                for sent in response.get("Successful", []):
                    index, _job, answer = to_send[sent["Id"]]
                    results[index] = {"index": index, **answer}
                failed = response.get("Failed", [])
                # SenderFault entries (a malformed entry) fail the same way again; only service faults retry.
                chunk = [entry["Id"] for entry in failed if not entry.get("SenderFault")]
                for entry in failed:
                    if entry.get("SenderFault"):
                        index, job, _answer = to_send[entry["Id"]]
                        results[index] = _enqueue_error(index, job, entry.get("Code", "SenderFault"))
                if not chunk:
                    break
                time.sleep(SEND_RETRY_BASE_SECONDS * 2**_attempt)  # service faults (throttling) need a pause
            for entry_id in chunk:  # still failing after the retries
                index, job, _answer = to_send[entry_id]
                results[index] = _enqueue_error(index, job, "RetriesExhausted")

    def _record(self, job: JobMessage, quota: JobQuota | None = None) -> dict[str, Any]:
        """The job recorded PENDING (one write, with the quota's), and the answer for its submitter: PENDING
        for a new job, or for a repeat (same callId) the job's state (`repeated`); the caller sends a message
        for either while the job is PENDING.

        A repeat sends again because nothing records that the first sender's message was sent (a write per
        job saved): that sender may have died between the record and the send. A duplicate message costs a
        receive, never a second run. A repeat with another tool or input, or for another user's job id, is
        an error entry."""
        store = self.store
        if self.admission.record(store, job, quota):
            return {"jobId": job.job_id, "status": JobStatus.PENDING.value}
        existing = store.get(job.job_id)
        if existing is None or existing.get("userId") != job.user_id:
            return {"error": {"type": "JobConflict", "message": "job id is taken"}}
        if existing.get("payloadHash", job.fingerprint()) != job.fingerprint():
            return {"error": {"type": "JobConflict", "message": "this callId was used for another request"}}
        answer = {"jobId": job.job_id, "status": existing["status"], "repeated": True}
        return {**answer, "held": True} if "heldMessage" in existing else answer

    # -- cancel -----------------------------------------------------------------
    def cancel(self, user_id: str, job_id: str) -> dict[str, Any]:
        """Cancel the caller's PENDING or RUNNING job: the worker does not run it, or stops it at its next
        checkpoint, and never records a result. A finished job is refused and left as it is."""
        item = self.owned(user_id, job_id)
        if item["status"] in TERMINAL_STATUSES or not self.store.mark_cancelled(job_id, user_id):
            # Not cancellable, or it finished between the read and the write.
            raise JobAlreadyFinished(f"job {job_id} has already finished")
        if item.get("durableExecutionArn") and self.queues.durable_worker_arn:
            self._stop_durable(str(item["durableExecutionArn"]), job_id)
        return {"jobId": job_id, "status": JobStatus.CANCELLED.value}

    def _stop_durable(self, execution_arn: str, job_id: str) -> None:
        """Stop the job's durable execution (its slot was freed by the cancel's write). A stop that fails is only
        logged: the execution stops anyway at its next step, which finds the job CANCELLED."""
        try:
            self._clients("lambda").stop_durable_execution(
                DurableExecutionArn=execution_arn,
                Error={"ErrorType": "JobCancelled", "ErrorMessage": "cancelled by its owner"},
            )
        except (botocore_errors.ClientError, botocore_errors.BotoCoreError) as error:
            logger.warning(
                "durable execution not stopped", extra={"job_id": job_id, "error_type": type(error).__name__}
            )

    # -- read -------------------------------------------------------------------
    def owned(self, user_id: str, job_id: str) -> dict[str, Any]:
        """The caller's job as JobTable holds it (a large result is only its `resultKey`)."""
        item = self.store.get(job_id)
        if item is None or item.get("userId") != user_id:
            # Someone else's job is indistinguishable from no job.
            raise JobNotFound(f"no job {job_id}")
        return item

    def jobs(self, user_id: str, limit: int, cursor_text: str | None = None) -> tuple[list[dict[str, Any]], str | None]:
        """The caller's jobs (jobId, tool, status, createdAt), newest first, `limit` per page, and the next page's
        cursor; read from JobTable's JobsByUser index (eventually consistent: a job just submitted may show a
        moment later)."""
        after = JobsCursor.decode(cursor_text).position() if cursor_text is not None else None
        items, position = self.store.jobs_page(user_id, limit, after)
        keys = ("jobId", "tool", "status", "createdAt")
        jobs: list[dict[str, Any]] = [{key: item[key] for key in keys if key in item} for item in items]
        cursor = JobsCursor(job_id=position["jobId"], created_at=position["createdAt"]).encode() if position else None
        return jobs, cursor

    def state(self, user_id: str, job_id: str) -> dict[str, Any]:
        """The caller's job without its result: status, tool, timestamps, error, and whether it has a result."""
        item = self.owned(user_id, job_id)
        view: dict[str, Any] = {"jobId": job_id, "status": item["status"], "tool": item.get("tool")}
        view.update(_progress(item))
        for key in ("createdAt", "updatedAt", "completedAt", "error"):
            if key in item:
                view[key] = item[key]
        view["hasResult"] = "result" in item or "resultKey" in item
        return view

    def result_page(self, user_id: str, job_id: str, page: int) -> ResultPage:
        """Page `page` (from 0) of the caller's job's result JSON text, `result_page_bytes` at a time; a result in
        the bucket is read with one ranged GetObject. JobNotFound for a job that is not the caller's, has no
        result, or has fewer pages."""
        item = self.owned(user_id, job_id)
        if "result" not in item and "resultKey" not in item:
            raise JobNotFound(f"job {job_id} has no result")
        size = self.queues.result_page_bytes
        text, total = self._result_bytes(item, page * size, size)
        pages = max(1, -(-total // size))
        if page >= pages:
            raise JobNotFound(f"job {job_id}'s result has {pages} pages")
        return ResultPage(text=text, page=page, pages=pages, total_bytes=total)

    def page(self, user_id: str, job_id: str, cursor_text: str | None = None) -> dict[str, Any]:
        """The caller's job, with its result whole when it fits one page, else one page of its JSON text by bytes
        (`resultChunk`, `nextCursor`). A result in the bucket is read a page at a time with ranged reads: a page
        costs its own bytes, never the whole object."""
        item = self.owned(user_id, job_id)
        view: dict[str, Any] = {"jobId": job_id, "status": item["status"], "tool": item.get("tool")}
        view.update(_progress(item))
        for key in ("createdAt", "updatedAt", "completedAt", "error"):
            if key in item:
                view[key] = item[key]
        cursor = JobCursor.decode(cursor_text) if cursor_text is not None else None
        has_result = "result" in item or "resultKey" in item
        if cursor is not None and (cursor.job_id != job_id or not has_result):
            raise InvalidCursor("the cursor does not belong to this job's result")
        if not has_result:
            return view
        page = self.queues.result_page_bytes
        offset = cursor.offset if cursor is not None else 0
        chunk, total = self._result_bytes(item, offset, page)
        if offset >= total:
            raise InvalidCursor("the cursor does not belong to this job's result")
        if offset == 0 and total <= page:
            view["result"] = item["result"] if "result" in item else json.loads(chunk)
            return view
        # Too large for one response: the result's JSON text in pages; concatenate resultChunk in order.
        view["resultChunk"] = chunk
        view["resultChars"] = total  # its bytes too: the text is ASCII
        if offset + page < total:
            view["nextCursor"] = JobCursor(job_id=job_id, offset=offset + page).encode()
        return view

    def _result_bytes(self, item: dict[str, Any], offset: int, length: int) -> tuple[str, int]:
        """Bytes of the result's JSON text from `offset`, and its whole size."""
        if "resultKey" in item:
            if not self.queues.result_bucket_name:
                raise JobNotFound(f"the result of job {item['jobId']} is not readable here")
            objects = ResultObjects(self.queues.result_bucket_name, self._clients("s3"))
            return objects.get_range(str(item["resultKey"]), offset, length)
        # Inline results are under INLINE_RESULT_LIMIT_BYTES: the item already holds the whole text.
        text = result_text(item["result"])
        return text[offset : offset + length], len(text)

    def failed(self, user_id: str, limit: int, cursor_text: str | None = None) -> dict[str, Any]:
        """The caller's failed jobs, newest first, `limit` per page, from JobTable's sparse index of failures
        (so every one is listed however deep the DLQ is), with the error the worker recorded on the final
        attempt. Only the caller's own figures: the shared DLQ (whose depth counts every tenant's failures) is
        not read at all."""
        after = FailedCursor.decode(cursor_text).position() if cursor_text is not None else None
        items, position = self.store.failed_page(user_id, limit, after)
        failed = [
            {
                "jobId": item["jobId"],
                "messageId": item.get("failedMessageId"),
                "tool": item.get("tool"),
                "status": item.get("status", "UNKNOWN"),
                # The worker writes the error and the DLQ message's id together, on the failure that ended the job.
                "error": item.get("error"),
                "failedAt": item.get("failedAt"),
            }
            for item in items
        ]
        page: dict[str, Any] = {"failedJobs": failed}
        if position is not None:
            page["nextCursor"] = FailedCursor(job_id=position["jobId"], failed_at=position["failedAt"]).encode()
        return page


def _progress(item: dict[str, Any]) -> dict[str, Any]:
    """A job's progress as its worker last recorded it (the durable worker records it per step)."""
    if "progress" not in item:
        return {}
    return {"progress": float(item["progress"]), "progressMessage": str(item.get("progressMessage", ""))}


def _job_for(user_id: str, submission: JobSubmission) -> JobMessage:
    if submission.call_id is not None:
        job_id = uuid.uuid5(CALL_ID_NAMESPACE, f"{user_id}\n{submission.call_id}").hex
    else:
        job_id = uuid.uuid4().hex
    return JobMessage(
        job_id=job_id, user_id=user_id, tool=submission.tool, input=submission.input, submitted_at=datetime.now(UTC)
    )


def _error(error: JobRequestError) -> dict[str, str]:
    return {"type": error.error_type, "message": str(error)}


def _enqueue_error(index: int, job: JobMessage, code: str) -> dict[str, Any]:
    return {
        "index": index,
        "jobId": job.job_id,
        "error": {"type": "EnqueueFailed", "message": f"{code}; submit again with the same callId to retry"},
    }
