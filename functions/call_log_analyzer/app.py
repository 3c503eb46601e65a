"""CallLogAnalyzer: per-tool error metrics and alerts from the filtered call-log stream."""

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType
from aws_lambda_powertools.utilities.typing import LambdaContext

from mcp_backend.batch import handle_batch
from mcp_backend.calllog.analyzer import CallLogAnalyzer
from mcp_backend.config import CallLogAnalyzerSettings, load_settings
from mcp_backend.observability import instrumented_handler

analyzer = CallLogAnalyzer(load_settings(CallLogAnalyzerSettings))
# Failures are reported by sequence number; Lambda resumes the shard from the lowest one.
processor = BatchProcessor(event_type=EventType.KinesisDataStreams, raise_on_entire_batch_failure=False)


@instrumented_handler()
def handler(event: dict, context: LambdaContext) -> dict:
    return handle_batch(event, context, event_source="aws:kinesis", processor=processor, consumer=analyzer)
