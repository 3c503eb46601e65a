"""ToolWorker: runs tool jobs from the job queue, a batch's records at once, reporting partial batch failures."""

from aws_lambda_powertools.utilities.batch import AsyncBatchProcessor, EventType
from aws_lambda_powertools.utilities.typing import LambdaContext

from mcp_backend.aws import AwsClients
from mcp_backend.batch import RecordThreads, handle_batch
from mcp_backend.config import WorkerSettings, load_settings
from mcp_backend.jobs.store import JobStore
from mcp_backend.jobs.worker import JobWorker
from mcp_backend.observability import instrumented_handler
from mcp_backend.tools.services import ToolServices
from mcp_backend.tools.table import TOOLS

settings = load_settings(WorkerSettings)
# The tool table and the services its tools declare, built as the endpoint builds them.
worker = JobWorker(
    settings, JobStore(settings.job_table_name), TOOLS, ToolServices.from_settings(settings, AwsClients())
)
# A batch whose records all fail is reported like any other: every id in batchItemFailures.
processor = AsyncBatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)
record_threads = RecordThreads(worker.process, settings.record_concurrency)


@instrumented_handler(correlation_id_path="Records[0].messageId")
def handler(event: dict, context: LambdaContext) -> dict:
    return handle_batch(
        event, context, event_source="aws:sqs", processor=processor, consumer=worker, record_threads=record_threads
    )
