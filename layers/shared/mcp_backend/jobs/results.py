"""Where a job's result lives: inline in its JobTable item when it is small, else as one object in the stack's
job-result bucket, with the item holding only the pointer (`resultKey`).

A DynamoDB item, attribute names and values together, is at most 400 KB
(https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Constraints.html#limits-items); the rest
of a job item (status, timestamps, error, input summary) takes far less than the headroom left below that
by INLINE_RESULT_LIMIT_BYTES. The worker writes result objects (s3:PutObject only); the endpoint reads them
(s3:GetObject only); the bucket's lifecycle rule expires them with the job item's TTL.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from mcp_backend.aws import botocore_errors, client_or_lazy
from mcp_backend.jobs.errors import ResultTooLarge
from mcp_backend.jobs.models import JobMessage, JobOutcome, JobStatus

# Results whose JSON text is larger than this are stored in the result bucket.
INLINE_RESULT_LIMIT_BYTES = 300 * 1024


def result_text(result: dict[str, Any]) -> str:
    """A result's JSON text, the form it is stored and paged in: ASCII (json.dumps escapes the rest), so a page
    of its bytes is a page of its characters and never splits one."""
    return json.dumps(result, separators=(",", ":"), default=str)


def result_key(user_id: str, job_id: str) -> str:
    """One object per job under its owner's prefix; the job id names it, the key never carries input."""
    return f"results/{user_id}/{job_id}.json"


def stored_outcome(job: JobMessage, result: dict[str, Any], cap: int, objects: ResultObjects | None) -> JobOutcome:
    """The outcome a job's end stores, the same for the queued and the durable worker: the result's text inline, or
    written to the result bucket and referred to by key. ResultTooLarge past `cap` bytes (permanent)."""
    text = result_text(result)
    if len(text) > cap:  # ASCII: its length is its size
        raise ResultTooLarge(f"the result is {len(text)} bytes, over the {cap}-byte limit for job results")
    if len(text) <= INLINE_RESULT_LIMIT_BYTES or objects is None:
        return JobOutcome(job_id=job.job_id, status=JobStatus.SUCCEEDED, result_text=text)
    key = result_key(job.user_id, job.job_id)
    objects.put(key, text)
    return JobOutcome(job_id=job.job_id, status=JobStatus.SUCCEEDED, result_key=key)


@dataclass(frozen=True)
class ResultObjects:
    """The job-result bucket: one JSON object per large result."""

    bucket_name: str
    client: Any = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "client", client_or_lazy(self.client, "s3"))

    def put(self, key: str, text: str) -> None:
        self.client.put_object(
            Bucket=self.bucket_name,
            Key=key,
            Body=text.encode(),
            ContentType="application/json",
            ServerSideEncryption="AES256",
        )

    def get_range(self, key: str, start: int, length: int) -> tuple[str, int]:
        """Bytes `start` to `start + length - 1` of a result (one ranged GetObject: the rest is never read), and
        the result's whole size; ("", size) past its end."""
        try:
            answer = self.client.get_object(
                Bucket=self.bucket_name, Key=key, Range=f"bytes={start}-{start + length - 1}"
            )
        except botocore_errors.ClientError as error:
            if error.response.get("Error", {}).get("Code") != "InvalidRange":
                raise
            return "", start
        total = int(str(answer.get("ContentRange", "")).rpartition("/")[2] or answer["ContentLength"])
        return str(answer["Body"].read().decode("ascii")), total
