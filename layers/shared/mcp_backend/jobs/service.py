"""The jobs service: submit one job or many (SendMessageBatch with retries of the entries SQS reports
failed), page a stored result, and list the caller's jobs in the dead-letter queue. The MCP job tools
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
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mcp_backend.aws import AwsClients
from mcp_backend.jobs.errors import EnqueueFailed, InvalidCursor, JobConflict, JobNotFound
from mcp_backend.jobs.models import JOB_ID_PATTERN, JobMessage
from mcp_backend.jobs.store import JobStore
from mcp_backend.observability import logger

SEND_BATCH_LIMIT = 10  # SendMessageBatch entries per call
SEND_RETRY_BASE_SECONDS = 0.05
SEND_BATCH_ATTEMPTS = 3
MAX_BATCH_ITEMS = 100
DLQ_PEEK_ROUNDS = 5
# uuid5 namespace for client call ids: the same (user, callId) always names the same job.
CALL_ID_NAMESPACE = uuid.UUID("6f1c9f1e-5d0e-4c59-9a55-6a3d2c1b0e41")


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


class JobCursor(BaseModel):
    """What an opaque cursor carries: the job and the offset into its result's JSON text."""

    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True, populate_by_name=True)

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
            raise InvalidCursor("the cursor is not one this server issued") from None


class JobsService:
    def __init__(self, queues: JobQueues, clients: AwsClients | None = None) -> None:
        self.queues = queues
        self._clients = clients or AwsClients()

    @property
    def store(self) -> JobStore:
        return JobStore(self.queues.job_table_name, self._clients("dynamodb"))

    # -- submit -----------------------------------------------------------------
    def submit(self, user_id: str, submission: JobSubmission) -> dict[str, Any]:
        job = _job_for(user_id, submission)
        store = self.store
        if not store.create_pending(job):
            existing = store.get(job.job_id)
            if existing is None or existing.get("userId") != user_id:
                raise JobConflict("this job id is taken")
            if existing.get("enqueuedMessageId"):
                return {"jobId": job.job_id, "status": existing["status"], "repeated": True}
        # A repeat whose first attempt failed to enqueue sends again; the worker runs a job id once anyway.
        try:
            sent = self._clients("sqs").send_message(
                QueueUrl=self.queues.job_queue_url, MessageBody=job.body(), MessageAttributes=job.attributes()
            )
        except (BotoCoreError, ClientError) as error:
            # The SDK's text names the queue; the caller gets a retryable error, the log the type.
            logger.error("job not enqueued", extra={"error_type": type(error).__name__})
            raise EnqueueFailed("the job queue is unavailable; retry with the same callId") from None
        store.mark_enqueued(job.job_id, job.user_id, sent["MessageId"])
        return {"jobId": job.job_id, "status": "PENDING"}

    def submit_many(self, user_id: str, submissions: list[JobSubmission]) -> list[dict[str, Any]]:
        results: list[dict[str, Any]] = [{} for _ in submissions]
        to_send: dict[str, tuple[int, JobMessage]] = {}
        store = self.store
        for index, submission in enumerate(submissions):
            job = _job_for(user_id, submission)
            if any(pending.job_id == job.job_id for _, pending in to_send.values()):
                results[index] = {"index": index, "jobId": job.job_id, "status": "PENDING", "repeated": True}
                continue
            if not store.create_pending(job):
                existing = store.get(job.job_id)
                if existing is None or existing.get("userId") != user_id:
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
        sqs = self._clients("sqs")
        pending_ids = list(to_send)
        for start in range(0, len(pending_ids), SEND_BATCH_LIMIT):
            chunk = pending_ids[start : start + SEND_BATCH_LIMIT]
            for _attempt in range(SEND_BATCH_ATTEMPTS):
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
    def page(self, user_id: str, job_id: str, cursor_text: str | None = None) -> dict[str, Any]:
        item = self.store.get(job_id)
        if item is None or item.get("userId") != user_id:
            # Someone else's job is indistinguishable from no job.
            raise JobNotFound(f"no job {job_id}")
        view: dict[str, Any] = {"jobId": job_id, "status": item["status"], "tool": item.get("tool")}
        for key in ("createdAt", "updatedAt", "completedAt", "error"):
            if key in item:
                view[key] = item[key]
        cursor = JobCursor.decode(cursor_text) if cursor_text is not None else None
        if cursor is not None and (cursor.job_id != job_id or "result" not in item):
            raise InvalidCursor("the cursor does not belong to this job's result")
        if "result" not in item:
            return view
        text = json.dumps(item["result"], separators=(",", ":"), default=str)
        page = self.queues.result_page_bytes
        offset = 0
        if cursor is not None:
            if cursor.offset >= len(text):
                raise InvalidCursor("the cursor does not belong to this job's result")
            offset = cursor.offset
        if offset == 0 and len(text) <= page:
            view["result"] = item["result"]
            return view
        # Too large for one response: the result's JSON text in pages; concatenate resultChunk in order.
        view["resultChunk"] = text[offset : offset + page]
        view["resultChars"] = len(text)
        if offset + page < len(text):
            view["nextCursor"] = JobCursor(job_id=job_id, offset=offset + page).encode()
        return view

    def failed(self, user_id: str, limit: int) -> dict[str, Any]:
        """Peek the DLQ: ReceiveMessage with VisibilityTimeout=0 leaves every message visible (nothing is
        deleted or hidden); each is joined with the failure the worker recorded on its last attempt."""
        sqs = self._clients("sqs")
        url = self.queues.job_dead_letter_queue_url
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
            if body.user_id != user_id:
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


def _job_for(user_id: str, submission: JobSubmission) -> JobMessage:
    if submission.call_id is not None:
        job_id = uuid.uuid5(CALL_ID_NAMESPACE, f"{user_id}\n{submission.call_id}").hex
    else:
        job_id = uuid.uuid4().hex
    return JobMessage(
        job_id=job_id, user_id=user_id, tool=submission.tool, input=submission.input, submitted_at=datetime.now(UTC)
    )


def _enqueue_error(index: int, job: JobMessage, code: str) -> dict[str, Any]:
    return {
        "index": index,
        "jobId": job.job_id,
        "error": {"type": "EnqueueFailed", "message": f"{code}; submit again with the same callId to retry"},
    }
