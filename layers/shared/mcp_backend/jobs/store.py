"""Job state in JobTable: PENDING -> RUNNING -> SUCCEEDED | FAILED, every write scoped to the job's owner.

Enqueueing is claimed: a PENDING job without `enqueuedMessageId` is sent only by the holder of its enqueue
claim (a token with an expiry, taken by a conditional write), so concurrent submissions of one job send one
message, and a claim whose holder died expires and can be taken over. A FAILED job carries `failedUserId`
and `failedAt`, the keys of the sparse FailedJobsByUser index that list_failed_jobs reads; a new run removes
them.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from mcp_backend.aws import client_or_lazy
from mcp_backend.jobs.errors import JobOwnershipError
from mcp_backend.jobs.models import JobError, JobMessage, JobStatus

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

JOB_RETENTION_SECONDS = 30 * 24 * 3600  # JobTable TTL (attribute expiresAt)
# Writes are allowed for a new job or for the job's own user, never across users.
_OWNER_CONDITION = "attribute_not_exists(jobId) OR userId = :user"
# The sparse index of failed jobs per user, newest first (template.yaml, JobTable).
FAILED_JOBS_INDEX = "FailedJobsByUser"
# A job may be claimed for sending while it is PENDING, unsent, and nobody holds a live claim.
_CLAIMABLE = (
    "userId = :user AND #status = :pending AND attribute_not_exists(enqueuedMessageId) "
    "AND (attribute_not_exists(enqueueClaimExpiresAt) OR enqueueClaimExpiresAt < :now)"
)


@dataclass(frozen=True)
class EnqueueClaim:
    """The right to send a job's message: a token, valid until `expires_at` (epoch seconds)."""

    token: str
    expires_at: float


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
    def __init__(self, table_name: str, client: DynamoDBClient | None = None) -> None:
        client = client_or_lazy(client, "dynamodb")
        self.table_name = table_name
        self._client = client

    # -- writes ---------------------------------------------------------------
    def create_pending(self, job: JobMessage, claim: EnqueueClaim | None = None) -> bool:
        """Record a submitted job, holding its enqueue claim when one is given. Returns False when the id exists
        already (a repeated submission)."""
        now = _now()
        claimed = (
            {"enqueueClaim": {"S": claim.token}, "enqueueClaimExpiresAt": {"N": f"{claim.expires_at:.3f}"}}
            if claim
            else {}
        )
        try:
            self._client.put_item(
                TableName=self.table_name,
                Item={
                    **claimed,
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

    def claim_enqueue(self, job_id: str, user_id: str, claim: EnqueueClaim) -> bool:
        """Take the right to send the job's message. False: it is sent, no longer PENDING, another live claim
        holds it, or it is not this user's job."""
        try:
            self._client.update_item(
                TableName=self.table_name,
                Key={"jobId": {"S": job_id}},
                UpdateExpression="SET enqueueClaim = :token, enqueueClaimExpiresAt = :until",
                ConditionExpression=_CLAIMABLE,
                ExpressionAttributeNames={"#status": "status"},
                ExpressionAttributeValues={
                    ":user": {"S": user_id},
                    ":pending": {"S": JobStatus.PENDING},
                    ":now": {"N": f"{time.time():.3f}"},
                    ":token": {"S": claim.token},
                    ":until": {"N": f"{claim.expires_at:.3f}"},
                },
            )
        except self._client.exceptions.ConditionalCheckFailedException:
            return False
        return True

    def release_enqueue(self, job_id: str, user_id: str, claim: EnqueueClaim) -> None:
        """The send failed: give the claim up so a retry with the same callId can send at once."""
        try:
            self._client.update_item(
                TableName=self.table_name,
                Key={"jobId": {"S": job_id}},
                UpdateExpression="REMOVE enqueueClaim, enqueueClaimExpiresAt",
                ConditionExpression="userId = :user AND enqueueClaim = :token",
                ExpressionAttributeValues={":user": {"S": user_id}, ":token": {"S": claim.token}},
            )
        except self._client.exceptions.ConditionalCheckFailedException:
            pass  # the claim expired and another sender holds the job now

    def mark_enqueued(self, job_id: str, user_id: str, message_id: str) -> None:
        """The job's message is on the queue: a repeated submission (same callId) must not send another."""
        self._update(
            job_id,
            user_id,
            "SET enqueuedMessageId = :message, updatedAt = :now REMOVE enqueueClaim, enqueueClaimExpiresAt",
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
            "expiresAt = if_not_exists(expiresAt, :expires) ADD runs :one REMOVE #error, failedUserId, failedAt",
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
            "SET #status = :status, #result = :result, updatedAt = :now, completedAt = :now "
            "REMOVE #error, failedUserId, failedAt",
            {
                ":status": {"S": JobStatus.SUCCEEDED},
                ":result": {"S": json.dumps(result, separators=(",", ":"), default=str)},
                ":now": {"S": _now()},
            },
        )

    def mark_failed(self, job_id: str, user_id: str, error: JobError, message_id: str, tool: str = "") -> None:
        """The final attempt failed: record why and the DLQ message's id, and list the job in its owner's
        failed jobs (the sparse index's keys)."""
        now = _now()
        self._update(
            job_id,
            user_id,
            "SET #status = :status, #error = :error, failedMessageId = :message, updatedAt = :now, "
            "failedUserId = :user, failedAt = :now, "
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
                "REMOVE #error, completedAt, failedMessageId, failedUserId, failedAt",  # off the failed-jobs index
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

    def failed_page(
        self, user_id: str, limit: int, after: dict[str, str] | None = None
    ) -> tuple[list[dict[str, Any]], dict[str, str] | None]:
        """Up to `limit` of the user's failed jobs, newest first, from the position `after` (jobId and
        failedAt of the last job of the previous page); returns them and the next position, if any."""
        request: dict[str, Any] = {
            "TableName": self.table_name,
            "IndexName": FAILED_JOBS_INDEX,
            "KeyConditionExpression": "failedUserId = :user",
            "ExpressionAttributeValues": {":user": {"S": user_id}},
            "ScanIndexForward": False,
            "Limit": limit,
        }
        if after is not None:
            request["ExclusiveStartKey"] = {
                "jobId": {"S": after["jobId"]},
                "failedUserId": {"S": user_id},
                "failedAt": {"S": after["failedAt"]},
            }
        response = self._client.query(**request)
        last = response.get("LastEvaluatedKey")
        position = {"jobId": last["jobId"]["S"], "failedAt": last["failedAt"]["S"]} if last else None
        return [_plain(item) for item in response.get("Items", [])], position

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
