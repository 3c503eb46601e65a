"""ProbeWorker: probes one MCP endpoint; the result (or the typed error) leaves through its Destinations."""

from aws_lambda_powertools.utilities.typing import LambdaContext

from mcp_backend.config import ProbeWorkerSettings, load_settings
from mcp_backend.observability import instrumented_handler
from mcp_backend.probes.worker import ProbeWorker

worker = ProbeWorker(load_settings(ProbeWorkerSettings))


@instrumented_handler()
def handler(event: dict, context: LambdaContext) -> dict:
    return worker.handle(event)
