"""ProbeRecorder: stores probe results from ProbeResultQueue in MonitorTable, reporting partial batch failures."""

from aws_lambda_powertools.utilities.typing import LambdaContext

from mcp_backend.config import ProbeRecorderSettings, load_settings
from mcp_backend.observability import instrumented_handler
from mcp_backend.probes.recorder import ProbeRecorder

recorder = ProbeRecorder(load_settings(ProbeRecorderSettings))


@instrumented_handler(correlation_id_path="Records[0].messageId")
def handler(event: dict, context: LambdaContext) -> dict:
    return recorder.handle(event)
