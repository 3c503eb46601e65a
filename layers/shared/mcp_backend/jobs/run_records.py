"""Powertools idempotency with the job item as the idempotency record: a persistence layer over JobTable
(through its owner, jobs/store.py), so running a job once costs no writes besides the job's own.

- INPROGRESS (expiring at the function's timeout + 5 s) is RUNNING with `runExpiresAt` (epoch ms), taken by
  `claim_run`: one conditional UpdateItem.
- COMPLETED is SUCCEEDED, written by `mark_succeeded`: one conditional UpdateItem with the result.
- A failed run's deleted record is RUNNING with `runExpiresAt` 0 (`release_run`).
- A RUNNING job without `runExpiresAt` was started by a worker that predates run claims: its claim is taken to
  hold for one claim window after its `updatedAt`.
- The payload hash is `payloadHash`, the job's fingerprint (owner, tool, input), stored at submit.

A job that is CANCELLED or FAILED reads as COMPLETED: a redelivered message of a job that ended is never
run again (a redrive sets the job PENDING first). The idempotency key is the job id itself, not a hash: it
is the table's key.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from mcp_backend.idempotency import (
    STATUS_CONSTANTS,
    BasePersistenceLayer,
    DataRecord,
    IdempotencyItemAlreadyExistsError,
    IdempotencyItemNotFoundError,
    IdempotencyKeyError,
)
from mcp_backend.jobs.models import JobOutcome, JobRun, JobStatus
from mcp_backend.jobs.store import JobStore

# The idempotent call's data: JobRun's fields, as Powertools hands them over (model_dump).
RUN_KEY_JMESPATH = "job.job_id"
INPROGRESS, COMPLETED = STATUS_CONSTANTS["INPROGRESS"], STATUS_CONSTANTS["COMPLETED"]
# What the fingerprint covers (JobMessage.fingerprint computes it; named here for Powertools' config).
RUN_PAYLOAD_JMESPATH = "job.[user_id, tool, input]"


class JobRunRecords(BasePersistenceLayer):
    """The persistence layer: one instance per execution environment, shared by a batch's record threads
    (it keeps no per-record state)."""

    def __init__(self, store: JobStore, clock: Callable[[], float] = time.time) -> None:
        super().__init__()
        self.store = store
        self._clock = clock  # epoch seconds: when a claim is taken and until when it holds

    # -- keys --------------------------------------------------------------------
    def _get_hashed_idempotency_key(self, data: dict[str, Any]) -> str:
        return _run(data).job.job_id

    def _get_hashed_payload(self, data: dict[str, Any]) -> str:
        return _run(data).job.fingerprint()

    # -- the three writes of a run ------------------------------------------------
    def save_inprogress(self, data: dict[str, Any], remaining_time_in_millis: int | None = None) -> None:
        if remaining_time_in_millis is None:
            # Without it a claim would never expire: fail closed (RunOnce registers the InProgressWindow).
            raise IdempotencyKeyError("no Lambda context registered: the run's claim would have no expiry")
        run = _run(data)
        now_ms = int(self._clock() * 1000)
        existing = self.store.claim_run(run.job, run.attempt, now_ms + remaining_time_in_millis, now_ms)
        if existing is None:
            return
        record = self._data_record(existing, run, remaining_time_in_millis)
        self._validate_payload(data_payload=data, stored_data_record=record)
        raise IdempotencyItemAlreadyExistsError(old_data_record=record)

    def save_success(self, data: dict[str, Any], result: dict) -> None:
        outcome = JobOutcome.model_validate(result)
        if outcome.status is JobStatus.SUCCEEDED:
            self.store.mark_succeeded(_run(data).job, outcome.result_text, outcome.result_key)
        # CANCELLED while it ran: the owner's cancel wrote the job's end (and freed its slot) already.

    def delete_record(self, data: dict[str, Any], exception: Exception) -> None:
        job = _run(data).job
        self.store.release_run(job.job_id, job.user_id)

    def _get_record(self, idempotency_key: str) -> DataRecord:
        item = self.store.get(idempotency_key)
        if item is None:
            raise IdempotencyItemNotFoundError
        return self._data_record(item, None, None)

    def _data_record(self, item: dict[str, Any], run: JobRun | None, window_ms: int | None) -> DataRecord:
        job_id, status = str(item.get("jobId", "")), item.get("status")
        payload_hash = str(item.get("payloadHash", ""))
        if not payload_hash and run is not None and item.get("userId") == run.job.user_id:
            payload_hash = run.job.fingerprint()  # recorded before payloads were fingerprinted: the owner's
        if status in (JobStatus.PENDING, JobStatus.RUNNING):
            # A claim the write refused is live; one that is not (given up, or expired, meanwhile) reads as
            # expired, and Powertools tries the claim again.
            until = int(item["runExpiresAt"]) if "runExpiresAt" in item else _unclaimed_until(item, window_ms)
            if status == JobStatus.RUNNING and until > int(self._clock() * 1000):
                return DataRecord(job_id, INPROGRESS, in_progress_expiry_timestamp=until, payload_hash=payload_hash)
            return DataRecord(job_id, INPROGRESS, expiry_timestamp=1, payload_hash=payload_hash)
        ended = JobOutcome(job_id=job_id, status=JobStatus(str(status)))
        return DataRecord(job_id, COMPLETED, response_data=ended.model_dump_json(), payload_hash=payload_hash)

    # The writes above replace Powertools' generic put/update/delete of a record by key.
    def _put_record(self, data_record: DataRecord) -> None:
        raise NotImplementedError("a run is claimed by save_inprogress")

    def _update_record(self, data_record: DataRecord) -> None:
        raise NotImplementedError("a run is completed by save_success")

    def _delete_record(self, data_record: DataRecord) -> None:
        raise NotImplementedError("a run is given up by delete_record")


def _run(data: dict[str, Any]) -> JobRun:
    try:
        return JobRun.model_validate(data)
    except ValidationError:
        raise IdempotencyKeyError("the idempotent call's data is not a job run") from None


def _unclaimed_until(item: dict[str, Any], window_ms: int | None) -> int:
    """When a run recorded without a claim (by a worker that predates claims) stops counting as live: one claim
    window after its last update; at once when the window or the time is unknown."""
    updated = item.get("updatedAt")
    if window_ms is None or not isinstance(updated, str):
        return 0
    try:
        return int(datetime.fromisoformat(updated).timestamp() * 1000) + window_ms
    except ValueError:
        return 0
