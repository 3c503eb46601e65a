"""AlertHandler: one AlertTopic message per endpoint and incident window, from filtered probe envelopes."""

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType
from aws_lambda_powertools.utilities.typing import LambdaContext

from mcp_backend.batch import handle_batch
from mcp_backend.config import AlertHandlerSettings, load_settings
from mcp_backend.observability import instrumented_handler
from mcp_backend.probes.alerts import AlertHandler

consumer = AlertHandler(load_settings(AlertHandlerSettings))
processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)


@instrumented_handler(correlation_id_path="Records[0].messageId")
def handler(event: dict, context: LambdaContext) -> dict:
    return handle_batch(event, context, event_source="aws:sqs", processor=processor, consumer=consumer)
