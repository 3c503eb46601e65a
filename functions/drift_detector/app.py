"""DriftDetector: schema drift from new probe results, to the call log."""

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType
from aws_lambda_powertools.utilities.typing import LambdaContext

from mcp_backend.batch import handle_batch
from mcp_backend.config import DriftDetectorSettings, load_settings
from mcp_backend.monitor.drift import DriftDetector
from mcp_backend.observability import instrumented_handler

consumer = DriftDetector(load_settings(DriftDetectorSettings))
processor = BatchProcessor(event_type=EventType.DynamoDBStreams, raise_on_entire_batch_failure=False)


@instrumented_handler()
def handler(event: dict, context: LambdaContext) -> dict:
    return handle_batch(event, context, event_source="aws:dynamodb", processor=processor, consumer=consumer)
