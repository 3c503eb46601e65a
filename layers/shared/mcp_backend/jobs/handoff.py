"""ToolWorker's choice for each job: run it itself, or start it as a durable execution of DurableToolWorker
(mcp_backend.jobs.durable) when its tool declares itself long or its input is at least DURABLE_JOB_MIN_BYTES.

The one submission path stays as it is (submit -> JobQueue -> ToolWorker): quotas and admission were applied at
submit. The execution is started asynchronously (InvocationType Event) on DurableToolWorker's alias, named by the
job id: Lambda answers a second start with the same name and payload with the existing execution, so a redelivered
record starts nothing new (https://docs.aws.amazon.com/lambda/latest/dg/durable-execution-idempotency.html). Its
ARN is kept on the job, which stays PENDING until the execution's first step takes it.
"""

from __future__ import annotations

from typing import Any, Protocol

from mcp_backend.aws import client_or_lazy
from mcp_backend.config import WorkerSettings
from mcp_backend.jobs.errors import JobPayloadMismatch
from mcp_backend.jobs.models import JobMessage


class SizedTool(Protocol):
    """What the choice reads of a tool (mcp_backend.tools.table.Tool)."""

    @property
    def long_running(self) -> bool: ...
    def input_size(self, arguments: dict[str, Any], context: Any) -> int | None: ...


class DurableStarts:
    """Starts jobs as durable executions of one function alias."""

    def __init__(self, function_arn: str, min_bytes: int, client: Any = None) -> None:
        self.function_arn = function_arn
        self.min_bytes = min_bytes
        self._client = client_or_lazy(client, "lambda")

    @classmethod
    def from_settings(cls, settings: WorkerSettings, client: Any = None) -> DurableStarts:
        """ToolWorker's: from DURABLE_JOB_MIN_BYTES, or past DATASET_MAX_BYTES (what ToolWorker refuses as too
        large to read in one invocation goes durable, whatever the first says)."""
        min_bytes = min(settings.durable_job_min_bytes, settings.dataset_max_bytes + 1)
        return cls(settings.durable_worker_arn, min_bytes, client)

    def wants(self, tool: SizedTool, arguments: dict[str, Any], context: Any) -> bool:
        """The job goes durable: its tool is long, or what it reads is at least `min_bytes`."""
        if tool.long_running:
            return True
        size = tool.input_size(arguments, context)
        return size is not None and size >= self.min_bytes

    def start(self, job: JobMessage) -> str:
        """Start the job's execution (or find the one already started for it); its ARN."""
        try:
            answer = self._client.invoke(
                FunctionName=self.function_arn,
                InvocationType="Event",
                Payload=job.body().encode(),
                DurableExecutionName=job.job_id,
            )
        except self._client.exceptions.DurableExecutionAlreadyStartedException:
            raise JobPayloadMismatch(
                "a durable execution with this job's id was started with another payload; this message is not run"
            ) from None
        return str(answer.get("DurableExecutionArn", ""))
