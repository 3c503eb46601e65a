"""ProbeWorker: probes one MCP endpoint; the result (or the typed error) leaves through its Destinations."""

from aws_lambda_powertools.utilities.typing import LambdaContext

from mcp_backend.config import ProbeWorkerSettings, load_settings
from mcp_backend.observability import logger, metrics, tracer
from mcp_backend.probes.worker import ProbeWorker

worker = ProbeWorker(load_settings(ProbeWorkerSettings))


@logger.inject_lambda_context(clear_state=True, log_event=False)
@tracer.capture_lambda_handler(capture_response=False, capture_error=True)
@metrics.log_metrics(capture_cold_start_metric=True)
def handler(event: dict, context: LambdaContext) -> dict:
    return worker.handle(event)
