"""Job state in JobTable: PENDING -> RUNNING -> SUCCEEDED | FAILED, or CANCELLED by its owner from PENDING or
RUNNING; every write scoped to the job's owner. A CANCELLED job is never run or completed again (the writes
are conditional), so a run that raced its cancellation never reports a result.

The job item is also the worker's run-once record (jobs/run_records.py): taking a job to run is one
conditional write (PENDING, or RUNNING under a claim that expired or was given up, and the same payload as
submitted) that records the claim's expiry; completing it is one conditional write that stores the result.
A FAILED job carries `failedUserId` and `failedAt`, the keys of the sparse FailedJobsByUser index that
list_failed_jobs reads; a new run removes them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, NoReturn, cast

from mcp_backend.aws import botocore_errors, client_or_lazy
from mcp_backend.block_leases import BlockLease, lease_block
from mcp_backend.jobs.errors import JobCancelled, JobOwnershipError, ResultTooLarge
from mcp_backend.jobs.models import JobError, JobMessage, JobStatus
from mcp_backend.quotas import JobQuota

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

JOB_RETENTION_SECONDS = 30 * 24 * 3600  # JobTable TTL (attribute expiresAt)
# Writes are allowed for a new job or for the job's own user, never across users.
_OWNER_CONDITION = "attribute_not_exists(jobId) OR userId = :user"
# Running and succeeding are refused once the owner cancelled the job.
_NOT_CANCELLED = "(attribute_not_exists(#status) OR #status <> :cancelled)"
# DynamoDB's answer to an item over 400 KB ("Item size has exceeded ..." on a put, "Item size to update has
# exceeded ..." on an update): a ValidationException that no retry can change.
_ITEM_TOO_LARGE = "exceeded the maximum allowed size"
# The sparse index of failed jobs per user, newest first (template.yaml, JobTable).
FAILED_JOBS_INDEX = "FailedJobsByUser"
# Every job of a user by creation time (template.yaml, JobTable; KEYS_ONLY, so only a job's put writes it): the
# caller's jobs as MCP resources. The day's count items carry no userId, so they are never in it.
JOBS_BY_USER_INDEX = "JobsByUser"
# A job may be taken for a run when it is new here, or its owner's, submitted with the same payload (or before
# payloads were fingerprinted), and PENDING or RUNNING under a claim that expired (its invocation was killed) or
# was given up (the run failed: its expiry is 0). A RUNNING job without a claim was started by a worker that
# predates run claims (a deploy's traffic shift runs both): it is taken only once the claim window has passed
# since its last update, so a run still going on the previous release is not run twice. CANCELLED, SUCCEEDED
# and FAILED jobs are never taken.
_RUN_CLAIMABLE = (
    "attribute_not_exists(jobId) OR (userId = :user "
    "AND (attribute_not_exists(payloadHash) OR payloadHash = :hash) "
    "AND (#status = :pending OR (#status = :running "
    "AND (runExpiresAt < :now_ms OR (attribute_not_exists(runExpiresAt) AND updatedAt < :stale)))))"
)


# The sparse index of the jobs holding their owner's concurrent-job slots: a job submitted under a quota carries
# `activeUserId` until the write that ends it (template.yaml, JobTable; KEYS_ONLY).
ACTIVE_JOBS_INDEX = "ActiveJobsByUser"
# The caller's daily count lives in the table's own key space; job ids cannot contain "#" (JOB_ID_PATTERN), and
# the item carries no userId, so no job write (_OWNER_CONDITION) can touch it.
_DAILY_PREFIX = "daily#"  # submitted: the day's jobs leased by every instance (TTL: the day after)
_IN_FLIGHT = (JobStatus.PENDING, JobStatus.RUNNING)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def _iso(epoch_ms: int) -> str:
    """Epoch milliseconds in the text form of updatedAt (see _now), so the two compare as strings."""
    return datetime.fromtimestamp(epoch_ms / 1000, UTC).isoformat(timespec="milliseconds")


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
    def create_pending(self, job: JobMessage, active: bool = False) -> bool:
        """Record a submitted job with its payload's fingerprint. Returns False when the id exists already (a
        repeated submission). `active`: the job item holds one of its owner's concurrent-job slots
        (`activeUserId`, removed by the write that ends the job). Admission (the tier's quotas) is decided above
        the store: jobs/quota_leases.py."""
        return self._put_pending(job, active)

    def count_in_flight(self, user_id: str, held_here: set[str], quota: JobQuota) -> int:
        """The caller's jobs holding a concurrent-job slot: the index's, and `held_here` (this instance's recent
        ones). Only when that reaches the limit are the jobs read (consistently) to leave out those that ended
        meanwhile or stopped being updated `slot_max_seconds` ago (a worker killed before it recorded the end)."""
        held = set(held_here)
        request: dict[str, Any] = {
            "TableName": self.table_name,
            "IndexName": ACTIVE_JOBS_INDEX,
            "KeyConditionExpression": "activeUserId = :user",
            "ExpressionAttributeValues": {":user": {"S": user_id}},
        }
        while True:
            response = self._client.query(**request)
            held.update(item["jobId"]["S"] for item in response.get("Items", []))
            if len(held) >= quota.concurrent_jobs or "LastEvaluatedKey" not in response:
                break
            request["ExclusiveStartKey"] = response["LastEvaluatedKey"]
        if len(held) < quota.concurrent_jobs:
            return len(held)
        oldest = datetime.fromtimestamp(time.time() - quota.slot_max_seconds, UTC).isoformat(timespec="milliseconds")
        jobs = self._slot_holders(sorted(held))
        return sum(1 for job_id in held if _in_flight(jobs.get(job_id), user_id, oldest))

    def _slot_holders(
        self, job_ids: list[str], projection: str = "jobId, userId, #status, updatedAt"
    ) -> dict[str, dict[str, Any]]:
        """The jobs' attributes in `projection` (by default only what decides a slot: never the result, which
        may be large), consistently read, 100 keys per BatchGetItem."""
        jobs: dict[str, dict[str, Any]] = {}
        for start in range(0, len(job_ids), 100):  # BatchGetItem reads at most 100 keys
            keys = [{"jobId": {"S": job_id}} for job_id in job_ids[start : start + 100]]
            request: dict[str, Any] = {
                self.table_name: {
                    "Keys": keys,
                    "ConsistentRead": True,
                    "ProjectionExpression": projection,
                    "ExpressionAttributeNames": {"#status": "status"},
                }
            }
            while request:
                response = self._client.batch_get_item(RequestItems=request)
                for found in response.get("Responses", {}).get(self.table_name, []):
                    jobs[found["jobId"]["S"]] = _plain(found)
                request = response.get("UnprocessedKeys") or {}
        return jobs

    def lease_daily(
        self, user_id: str, day: str, limit: int, block: int, next_block: Callable[[int], int]
    ) -> BlockLease | None:
        """Lease up to `block` of the caller's jobs for `day` (mcp_backend.block_leases; kept a day past its own)."""
        day_start = datetime.fromisoformat(day).replace(tzinfo=UTC)
        key = {"jobId": {"S": f"{_DAILY_PREFIX}{user_id}#{day}"}}
        expires = int(day_start.timestamp()) + 2 * 86400
        return lease_block(self._client, self.table_name, key, "submitted", limit, block, expires, next_block)

    def _put_pending(self, job: JobMessage, active: bool = False) -> bool:
        request = self._pending_put(job)
        if active:  # holds one of its owner's concurrent-job slots until the write that ends it
            request["Item"]["activeUserId"] = {"S": job.user_id}
        try:
            self._client.put_item(TableName=self.table_name, **request)
        except self._client.exceptions.ConditionalCheckFailedException:
            return False
        return True

    def _pending_put(self, job: JobMessage) -> dict[str, Any]:
        now = _now()
        return {
            "Item": {
                "jobId": {"S": job.job_id},
                "userId": {"S": job.user_id},
                "tool": {"S": job.tool},
                "status": {"S": JobStatus.PENDING},
                "payloadHash": {"S": job.fingerprint()},
                "inputSummary": {"S": _input_summary(job)},
                "attempts": {"N": "0"},
                "createdAt": {"S": now},
                "updatedAt": {"S": now},
                "expiresAt": {"N": str(int(time.time()) + JOB_RETENTION_SECONDS)},
            },
            "ConditionExpression": "attribute_not_exists(jobId)",
        }

    def claim_run(self, job: JobMessage, attempt: int, until_ms: int, now_ms: int) -> dict[str, Any] | None:
        """Take the job for this run (see _RUN_CLAIMABLE), RUNNING until `until_ms` (epoch milliseconds) unless
        completed or given up first; a job without a record (its message sent without one) is recorded here.
        None when taken; otherwise nothing is written and the job is returned as it stands (without its
        result), from the refused write itself: no second read."""
        try:
            self._client.update_item(
                TableName=self.table_name,
                Key={"jobId": {"S": job.job_id}},
                UpdateExpression="SET #status = :running, runExpiresAt = :until, attempts = :attempt, "
                "updatedAt = :now, userId = :user, tool = :tool, payloadHash = :hash, "
                "inputSummary = if_not_exists(inputSummary, :summary), createdAt = if_not_exists(createdAt, :now), "
                "expiresAt = if_not_exists(expiresAt, :expires) ADD runs :one REMOVE #error, failedUserId, failedAt",
                ConditionExpression=_RUN_CLAIMABLE,
                ExpressionAttributeNames={"#status": "status", "#error": "error"},
                ExpressionAttributeValues={
                    **_run_values(job),
                    ":now_ms": {"N": str(now_ms)},
                    ":stale": {"S": _iso(now_ms - (until_ms - now_ms))},  # one claim window before now
                    ":until": {"N": str(until_ms)},
                    ":attempt": {"N": str(attempt)},
                },
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except self._client.exceptions.ConditionalCheckFailedException as refused:
            item = dict(cast(dict[str, Any], refused.response).get("Item", {}))
            item.pop("result", None)
            return _plain(item)
        return None

    def start_durable(self, job: JobMessage, execution_arn: str) -> str:
        """Take the job for its durable execution: RUNNING, with the execution's ARN (cancel stops it by that ARN).
        A job without a record is recorded here, like the queued worker's claim. Returns the status the job has
        after the write: RUNNING when taken, else the one that refused it (a job cancelled or finished before the
        execution started is left as it is)."""
        try:
            self._client.update_item(
                TableName=self.table_name,
                Key={"jobId": {"S": job.job_id}},
                UpdateExpression="SET #status = :running, durableExecutionArn = :arn, updatedAt = :now, "
                "userId = :user, tool = :tool, payloadHash = :hash, "
                "inputSummary = if_not_exists(inputSummary, :summary), createdAt = if_not_exists(createdAt, :now), "
                "expiresAt = if_not_exists(expiresAt, :expires) ADD runs :one "
                "REMOVE #error, failedUserId, failedAt, runExpiresAt",
                ConditionExpression="attribute_not_exists(jobId) OR (userId = :user "
                "AND (attribute_not_exists(payloadHash) OR payloadHash = :hash) "
                "AND #status IN (:pending, :running))",
                ExpressionAttributeNames={"#status": "status", "#error": "error"},
                ExpressionAttributeValues={**_run_values(job), ":arn": {"S": execution_arn}},
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except self._client.exceptions.ConditionalCheckFailedException as refused:
            item = cast(dict[str, Any], refused.response).get("Item", {})
            if item.get("userId", {}).get("S") != job.user_id:
                raise JobOwnershipError(f"job {job.job_id} belongs to another user") from None
            return str(item.get("status", {}).get("S", JobStatus.FAILED))
        return JobStatus.RUNNING.value

    def record_handoff(self, job: JobMessage, execution_arn: str) -> bool:
        """The queued worker started the job's durable execution: its ARN is kept on the PENDING job (cancel stops
        the execution by it before its first step). False when the job is not PENDING any more."""
        return self._set_status_if(
            job.job_id,
            job.user_id,
            "SET durableExecutionArn = :arn, updatedAt = :now",
            "#status = :pending",
            {":pending": {"S": JobStatus.PENDING}, ":arn": {"S": execution_arn}},
        )

    def await_answer(self, job: JobMessage, question: str, callback_id: str) -> bool:
        """A running durable job waits for its user's answer: the question, and the callback its answer completes.
        False when it is not RUNNING any more."""
        return self._set_status_if(
            job.job_id,
            job.user_id,
            "SET awaitingInput = :question, answerCallbackId = :callback, updatedAt = :now",
            "#status = :running",
            {
                ":running": {"S": JobStatus.RUNNING},
                ":question": {"S": question},
                ":callback": {"S": callback_id},
            },
        )

    def take_answer_callback(self, job_id: str, user_id: str) -> str | None:
        """The callback a running job waits on, taken once (the question is removed with it): None when the job is
        not the owner's, not waiting, or no longer RUNNING."""
        return self._take_once(job_id, user_id, "answerCallbackId", JobStatus.RUNNING)

    def record_progress(self, job: JobMessage, fraction: float, message: str) -> bool:
        """A running job's progress (0..1) and what it did last; the write also keeps its concurrent-job slot
        fresh (updatedAt). False when the job is not RUNNING any more (cancelled meanwhile)."""
        return self._set_status_if(
            job.job_id,
            job.user_id,
            "SET progress = :progress, progressMessage = :message, updatedAt = :now",
            "#status = :running",
            {
                ":running": {"S": JobStatus.RUNNING},
                ":progress": {"N": str(round(min(max(fraction, 0.0), 1.0), 4))},
                ":message": {"S": message[:200]},
            },
        )

    def release_run(self, job_id: str, user_id: str) -> None:
        """The run failed: give its claim up, so the message's next receive runs the job again at once. The
        job stays RUNNING (between attempts) with what its attempts recorded. Cancelled (or recorded as
        failed) meanwhile: there is nothing to give up, and nothing is written."""
        self._set_status_if(
            job_id,
            user_id,
            "SET updatedAt = :now, runExpiresAt = :given_up",
            "#status = :running",
            {":running": {"S": JobStatus.RUNNING}, ":given_up": {"N": "0"}},
        )

    def mark_succeeded(self, job: JobMessage, result_text: str | None = None, result_key: str | None = None) -> None:
        """The job's result: its JSON text inline, or the key of the result object holding it. Raises
        JobCancelled when the owner cancelled the job meanwhile (the result is dropped), ResultTooLarge when
        the item would exceed DynamoDB's item size (permanent: the same result is refused on every retry).

        One write of the job item alone, which also gives its owner's concurrent-job slot back (the slot is the
        job item's `activeUserId`)."""
        stored = (
            ("#result = :result", {":result": {"S": result_text}})
            if result_key is None
            else ("resultKey = :key", {":key": {"S": result_key}})
        )
        self._update(
            job.job_id,
            job.user_id,
            f"SET #status = :status, {stored[0]}, updatedAt = :now, completedAt = :now "
            "REMOVE #error, failedUserId, failedAt, runExpiresAt, activeUserId",
            {":status": {"S": JobStatus.SUCCEEDED}, ":now": {"S": _now()}, **stored[1]},
            unless_cancelled=True,
        )

    def mark_cancelled(self, job_id: str, user_id: str) -> bool:
        """The owner cancels a PENDING or RUNNING job. False when it is not (any longer) in one of those
        states or not this user's job: nothing is written then."""
        cancelled = self._set_status_if(
            job_id,
            user_id,
            "SET #status = :cancelled, updatedAt = :now, completedAt = :now, cancelledAt = :now REMOVE activeUserId",
            "#status IN (:pending, :running)",
            {
                ":pending": {"S": JobStatus.PENDING},
                ":running": {"S": JobStatus.RUNNING},
                ":cancelled": {"S": JobStatus.CANCELLED},
            },
        )
        return cancelled  # a cancelled job never runs on: the same write freed its concurrent-job slot

    def hold_for_input(self, job: JobMessage, question: str) -> bool:
        """The owner's new PENDING job waits for its user's answer: the question and the message to send once
        answered are kept on the item (no message is in the queue). False when it is not PENDING any more."""
        return self._set_status_if(
            job.job_id,
            job.user_id,
            "SET awaitingInput = :question, heldMessage = :message, updatedAt = :now",
            "#status = :pending AND attribute_not_exists(awaitingInput)",
            {
                ":pending": {"S": JobStatus.PENDING},
                ":question": {"S": question},
                ":message": {"S": job.body()},
            },
        )

    def release_held(self, job_id: str, user_id: str) -> JobMessage | None:
        """The held job's message, taken once (the write that removes it is conditional): None when the job is
        not the owner's, not held, or no longer PENDING (cancelled meanwhile)."""
        held = self._take_once(job_id, user_id, "heldMessage", JobStatus.PENDING)
        return JobMessage.model_validate_json(held) if held is not None else None

    def _take_once(self, job_id: str, user_id: str, attribute: str, status: JobStatus) -> str | None:
        """`attribute` of the owner's job in `status`, removed with its question in one conditional write, so only
        one caller gets it; None when the job is not the owner's, lacks it, or is in another status."""
        try:
            old = self._client.update_item(
                TableName=self.table_name,
                Key={"jobId": {"S": job_id}},
                UpdateExpression="REMOVE awaitingInput, #taken SET updatedAt = :now",
                ConditionExpression="userId = :user AND #status = :status AND attribute_exists(#taken)",
                ExpressionAttributeNames={"#status": "status", "#taken": attribute},
                ExpressionAttributeValues={":user": {"S": user_id}, ":now": {"S": _now()}, ":status": {"S": status}},
                ReturnValues="UPDATED_OLD",
            )
        except self._client.exceptions.ConditionalCheckFailedException:
            return None
        return str(old["Attributes"][attribute]["S"])

    def _set_status_if(self, job_id: str, user_id: str, update: str, condition: str, values: dict[str, Any]) -> bool:
        """An update of the owner's job in the state `condition` names; False (nothing written) otherwise."""
        try:
            self._client.update_item(
                TableName=self.table_name,
                Key={"jobId": {"S": job_id}},
                UpdateExpression=update,
                ConditionExpression=f"userId = :user AND {condition}",
                ExpressionAttributeNames={"#status": "status"},
                ExpressionAttributeValues={":user": {"S": user_id}, ":now": {"S": _now()}, **values},
            )
        except self._client.exceptions.ConditionalCheckFailedException:
            return False
        return True

    def is_cancelled(self, job_id: str) -> bool:
        """Whether the job is CANCELLED now (a consistent read of its status only)."""
        item = self._client.get_item(
            TableName=self.table_name,
            Key={"jobId": {"S": job_id}},
            ConsistentRead=True,
            ProjectionExpression="#status",
            ExpressionAttributeNames={"#status": "status"},
        ).get("Item")
        return item is not None and item.get("status", {}).get("S") == JobStatus.CANCELLED

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
            "createdAt = if_not_exists(createdAt, :now), expiresAt = if_not_exists(expiresAt, :expires) "
            "REMOVE activeUserId",
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
        items, position = self._newest_of_user(FAILED_JOBS_INDEX, "failedUserId", "failedAt", user_id, limit, after)
        return [_plain(item) for item in items], position

    def jobs_page(
        self, user_id: str, limit: int, after: dict[str, str] | None = None
    ) -> tuple[list[dict[str, Any]], dict[str, str] | None]:
        """Up to `limit` of the user's jobs (id, tool, status, createdAt), newest first, from the position
        `after` (jobId and createdAt of the last job of the previous page); returns them and the next position.
        The index holds keys only (a status change never writes it): tool and status are read from the jobs."""
        items, position = self._newest_of_user(JOBS_BY_USER_INDEX, "userId", "createdAt", user_id, limit, after)
        listed = [item["jobId"]["S"] for item in items]
        jobs = self._slot_holders(listed, "jobId, userId, #status, tool, createdAt") if listed else {}
        return [jobs[job_id] for job_id in listed if jobs.get(job_id, {}).get("userId") == user_id], position

    def _newest_of_user(
        self, index: str, user_key: str, time_key: str, user_id: str, limit: int, after: dict[str, str] | None
    ) -> tuple[list[dict[str, Any]], dict[str, str] | None]:
        """One page of a per-user index (hash `user_key`, range `time_key`), newest first, from `after` (jobId
        and `time_key` of the previous page's last item): its raw items and the next position, if any."""
        request: dict[str, Any] = {
            "TableName": self.table_name,
            "IndexName": index,
            "KeyConditionExpression": f"{user_key} = :user",
            "ExpressionAttributeValues": {":user": {"S": user_id}},
            "ScanIndexForward": False,
            "Limit": limit,
        }
        if after is not None:
            request["ExclusiveStartKey"] = {
                "jobId": {"S": after["jobId"]},
                user_key: {"S": user_id},
                time_key: {"S": after[time_key]},
            }
        response = self._client.query(**request)
        last = response.get("LastEvaluatedKey")
        position = {"jobId": last["jobId"]["S"], time_key: last[time_key]["S"]} if last else None
        return response.get("Items", []), position

    def _update(
        self,
        job_id: str,
        user_id: str,
        expression: str,
        values: dict[str, Any],
        unless_cancelled: bool = False,
    ) -> None:
        request = self._update_request(job_id, user_id, expression, values, unless_cancelled)
        self._write(request, job_id, unless_cancelled)

    def _update_request(
        self, job_id: str, user_id: str, expression: str, values: dict[str, Any], unless_cancelled: bool
    ) -> dict[str, Any]:
        """An UpdateItem of the job (as a request or a transaction's Update), conditional on its owner."""
        names = {"#status": "status", "#error": "error", "#result": "result"}
        condition = _OWNER_CONDITION
        if unless_cancelled:
            condition = f"({_OWNER_CONDITION}) AND {_NOT_CANCELLED}"
            values = {**values, ":cancelled": {"S": JobStatus.CANCELLED}}
        return {
            "TableName": self.table_name,
            "Key": {"jobId": {"S": job_id}},
            "UpdateExpression": expression,
            "ConditionExpression": condition,
            "ExpressionAttributeNames": {k: v for k, v in names.items() if k in expression or k in condition},
            "ExpressionAttributeValues": {":user": {"S": user_id}, **values},
        }

    def _write(self, request: dict[str, Any], job_id: str, unless_cancelled: bool) -> None:
        try:
            self._client.update_item(**request)
        except self._client.exceptions.ConditionalCheckFailedException:
            self._refused(job_id, unless_cancelled)
        except botocore_errors.ClientError as error:
            _raise_if_too_large(error)
            raise

    def _refused(self, job_id: str, unless_cancelled: bool) -> NoReturn:
        """Why a conditional write of the job was refused: cancelled by its owner, or another user's job."""
        if unless_cancelled and self.is_cancelled(job_id):
            raise JobCancelled(f"job {job_id} was cancelled") from None
        raise JobOwnershipError(f"job {job_id} belongs to another user") from None


def _run_values(job: JobMessage) -> dict[str, Any]:
    """The values a write that starts a run of the job (queued or durable) sets and checks."""
    return {
        ":user": {"S": job.user_id},
        ":hash": {"S": job.fingerprint()},
        ":pending": {"S": JobStatus.PENDING},
        ":running": {"S": JobStatus.RUNNING},
        ":one": {"N": "1"},  # runs: how often the job body actually started
        ":now": {"S": _now()},
        ":tool": {"S": job.tool},
        ":summary": {"S": _input_summary(job)},
        ":expires": {"N": str(int(time.time()) + JOB_RETENTION_SECONDS)},
    }


def _raise_if_too_large(error: botocore_errors.ClientError) -> None:
    details = error.response.get("Error", {})
    if details.get("Code") == "ValidationException" and _ITEM_TOO_LARGE in str(details.get("Message")):
        raise ResultTooLarge("the result is larger than a job record holds") from None


def _in_flight(job: dict[str, Any] | None, user_id: str, oldest: str) -> bool:
    """The job still holds its slot: the user's, PENDING or RUNNING, and updated within the slot's lifetime."""
    if job is None or job.get("userId") != user_id or job.get("status") not in _IN_FLIGHT:
        return False
    return str(job.get("updatedAt", "")) >= oldest


def _plain(item: dict[str, Any]) -> dict[str, Any]:
    from boto3.dynamodb.types import TypeDeserializer

    deserializer = TypeDeserializer()
    plain = {key: deserializer.deserialize(value) for key, value in item.items()}
    if "result" in plain:
        plain["result"] = json.loads(plain["result"])
    return plain
