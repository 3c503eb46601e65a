"""ProbeRecorder: stores probe results from ProbeResultQueue in MonitorTable, reporting partial batch failures."""

from aws_lambda_powertools.utilities.typing import LambdaContext

from mcp_backend.config import ProbeRecorderSettings, load_settings
from mcp_backend.observability import logger, metrics, tracer
from mcp_backend.probes.recorder import ProbeRecorder

recorder = ProbeRecorder(load_settings(ProbeRecorderSettings))


@logger.inject_lambda_context(clear_state=True, correlation_id_path="Records[0].messageId", log_event=False)
@tracer.capture_lambda_handler(capture_response=False, capture_error=True)
@metrics.log_metrics(capture_cold_start_metric=True)
def handler(event: dict, context: LambdaContext) -> dict:
    return recorder.handle(event)
