"""Job state in JobTable: PENDING -> RUNNING -> SUCCEEDED | FAILED, every write scoped to the job's owner."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any

from mcp_backend.aws import client_or_lazy
from mcp_backend.jobs.errors import JobOwnershipError
from mcp_backend.jobs.models import JobError, JobMessage, JobStatus

JOB_RETENTION_SECONDS = 30 * 24 * 3600  # JobTable TTL (attribute expiresAt)
# Writes are allowed for a new job or for the job's own user, never across users.
_OWNER_CONDITION = "attribute_not_exists(jobId) OR userId = :user"


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def _input_summary(job: JobMessage) -> str:
    """Enough to recognise the job (tool argument names and URL host) without storing the payload."""
    summary: dict[str, Any] = {"keys": sorted(job.input)}
    url = job.input.get("dataset_url")
    if isinstance(url, str):
        summary["dataset"] = url.split("?", 1)[0].split("#", 1)[0].rsplit("@", 1)[-1][:256]
    return json.dumps(summary, sort_keys=True)


class JobStore:
    def __init__(self, table_name: str, client: Any = None) -> None:
        client = client_or_lazy(client, "dynamodb")
        self.table_name = table_name
        self._client = client

    # -- writes ---------------------------------------------------------------
    def create_pending(self, job: JobMessage) -> bool:
        """Record a submitted job. Returns False when the id exists already (a repeated submission)."""
        now = _now()
        try:
            self._client.put_item(
                TableName=self.table_name,
                Item={
                    "jobId": {"S": job.job_id},
                    "userId": {"S": job.user_id},
                    "tool": {"S": job.tool},
                    "status": {"S": JobStatus.PENDING},
                    "inputSummary": {"S": _input_summary(job)},
                    "attempts": {"N": "0"},
                    "createdAt": {"S": now},
                    "updatedAt": {"S": now},
                    "expiresAt": {"N": str(int(time.time()) + JOB_RETENTION_SECONDS)},
                },
                ConditionExpression="attribute_not_exists(jobId)",
            )
        except self._client.exceptions.ConditionalCheckFailedException:
            return False
        return True

    def mark_enqueued(self, job_id: str, user_id: str, message_id: str) -> None:
        """The job's message is on the queue: a repeated submission (same callId) must not send another."""
        self._update(
            job_id,
            user_id,
            "SET enqueuedMessageId = :message, updatedAt = :now",
            {":message": {"S": message_id}, ":now": {"S": _now()}},
        )

    def mark_running(self, job: JobMessage, attempt: int) -> None:
        now = _now()
        self._update(
            job.job_id,
            job.user_id,
            "SET #status = :status, attempts = :attempt, updatedAt = :now, userId = :user, tool = :tool, "
            "inputSummary = if_not_exists(inputSummary, :summary), "
            "createdAt = if_not_exists(createdAt, :now), "
            "expiresAt = if_not_exists(expiresAt, :expires) ADD runs :one REMOVE #error",
            {
                ":status": {"S": JobStatus.RUNNING},
                ":attempt": {"N": str(attempt)},
                ":one": {"N": "1"},  # runs: how often the job body actually started
                ":now": {"S": now},
                ":tool": {"S": job.tool},
                ":summary": {"S": _input_summary(job)},
                ":expires": {"N": str(int(time.time()) + JOB_RETENTION_SECONDS)},
            },
        )

    def mark_succeeded(self, job: JobMessage, result: dict[str, Any]) -> None:
        self._update(
            job.job_id,
            job.user_id,
            "SET #status = :status, #result = :result, updatedAt = :now, completedAt = :now REMOVE #error",
            {
                ":status": {"S": JobStatus.SUCCEEDED},
                ":result": {"S": json.dumps(result, separators=(",", ":"), default=str)},
                ":now": {"S": _now()},
            },
        )

    def mark_failed(self, job_id: str, user_id: str, error: JobError, message_id: str, tool: str = "") -> None:
        """The final attempt failed: record why, keyed so list_failed_jobs can match the DLQ message."""
        now = _now()
        self._update(
            job_id,
            user_id,
            "SET #status = :status, #error = :error, failedMessageId = :message, updatedAt = :now, "
            "completedAt = :now, userId = :user, tool = if_not_exists(tool, :tool), "
            "createdAt = if_not_exists(createdAt, :now), expiresAt = if_not_exists(expiresAt, :expires)",
            {
                ":status": {"S": JobStatus.FAILED},
                ":error": {"M": {"type": {"S": error.type}, "message": {"S": error.message}}},
                ":message": {"S": message_id},
                ":now": {"S": now},
                ":tool": {"S": tool or "unknown"},
                ":expires": {"N": str(int(time.time()) + JOB_RETENTION_SECONDS)},
            },
        )

    def mark_redriven(self, failed: dict[str, Any]) -> bool:
        """A FAILED job (as `get` read it) whose message goes back to JobQueue is PENDING again.

        Its history stays: `runs` keeps counting, and the failure (error, when, after how many receives)
        moves to the end of `failures` (`attempts` counts the receives of the message that runs it next).
        False when the job is no longer FAILED (already redriven, or running again).
        """
        error = failed.get("error") or {}
        failure = {
            "type": {"S": str(error.get("type", "unknown"))},
            "message": {"S": str(error.get("message", ""))},
            "failedAt": {"S": str(failed.get("completedAt", ""))},
            "attempts": {"N": str(failed.get("attempts", 0))},
        }
        try:
            self._client.update_item(
                TableName=self.table_name,
                Key={"jobId": {"S": str(failed["jobId"])}},
                UpdateExpression="SET #status = :pending, updatedAt = :now, "
                "failures = list_append(if_not_exists(failures, :none), :failure), "
                "redrives = if_not_exists(redrives, :zero) + :one "
                "REMOVE #error, completedAt, failedMessageId",
                ConditionExpression="userId = :user AND #status = :failed",
                ExpressionAttributeNames={"#status": "status", "#error": "error"},
                ExpressionAttributeValues={
                    ":user": {"S": str(failed["userId"])},
                    ":failed": {"S": JobStatus.FAILED},
                    ":pending": {"S": JobStatus.PENDING},
                    ":now": {"S": _now()},
                    ":none": {"L": []},
                    ":zero": {"N": "0"},
                    ":one": {"N": "1"},
                    ":failure": {"L": [{"M": failure}]},
                },
            )
        except self._client.exceptions.ConditionalCheckFailedException:
            return False
        return True

    # -- reads ----------------------------------------------------------------
    def get(self, job_id: str) -> dict[str, Any] | None:
        item = self._client.get_item(TableName=self.table_name, Key={"jobId": {"S": job_id}}, ConsistentRead=True)
        return _plain(item["Item"]) if "Item" in item else None

    def _update(self, job_id: str, user_id: str, expression: str, values: dict[str, Any]) -> None:
        names = {"#status": "status", "#error": "error", "#result": "result"}
        try:
            self._client.update_item(
                TableName=self.table_name,
                Key={"jobId": {"S": job_id}},
                UpdateExpression=expression,
                ConditionExpression=_OWNER_CONDITION,
                ExpressionAttributeNames={k: v for k, v in names.items() if k in expression},
                ExpressionAttributeValues={":user": {"S": user_id}, **values},
            )
        except self._client.exceptions.ConditionalCheckFailedException:
            raise JobOwnershipError(f"job {job_id} belongs to another user") from None


def _plain(item: dict[str, Any]) -> dict[str, Any]:
    from boto3.dynamodb.types import TypeDeserializer

    deserializer = TypeDeserializer()
    plain = {key: deserializer.deserialize(value) for key, value in item.items()}
    if "result" in plain:
        plain["result"] = json.loads(plain["result"])
    return plain
