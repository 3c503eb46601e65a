"""DurableToolWorker: runs one long job as a Lambda durable execution, in checkpointed steps that a crash does not
repeat (mcp_backend.jobs.durable). ToolWorker starts it, with the job's message as input and its id as name."""

from typing import Any

from aws_durable_execution_sdk_python import DurableContext, durable_execution

from mcp_backend.aws import AwsClients
from mcp_backend.config import DurableWorkerSettings, load_settings
from mcp_backend.jobs.durable import DurableJobs, DurableLimits
from mcp_backend.jobs.results import ResultObjects
from mcp_backend.jobs.store import JobStore
from mcp_backend.observability import instrumented_handler
from mcp_backend.tools.services import ToolServices
from mcp_backend.tools.table import TOOLS

settings = load_settings(DurableWorkerSettings)
jobs = DurableJobs(
    JobStore(settings.job_table_name),
    TOOLS,
    ToolServices.from_settings(settings, AwsClients()),
    DurableLimits(
        execution_timeout_seconds=settings.durable_execution_timeout_seconds,
        result_max_bytes=settings.job_result_max_bytes,
    ),
    results=ResultObjects(settings.job_result_bucket_name) if settings.job_result_bucket_name else None,
)


@durable_execution
def run(event: dict[str, Any], context: DurableContext) -> dict[str, Any]:
    return jobs.run(event, context)


handler = instrumented_handler()(run)
