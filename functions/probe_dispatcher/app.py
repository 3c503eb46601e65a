"""ProbeDispatcher: on each schedule tick, one asynchronous ProbeWorker invocation per registered endpoint."""

from aws_lambda_powertools.utilities.typing import LambdaContext

from mcp_backend.config import ProbeDispatcherSettings, load_settings
from mcp_backend.observability import logger, metrics, tracer
from mcp_backend.probes.dispatcher import ProbeDispatcher

dispatcher = ProbeDispatcher(load_settings(ProbeDispatcherSettings))


@logger.inject_lambda_context(clear_state=True, log_event=False)
@tracer.capture_lambda_handler(capture_response=False, capture_error=True)
@metrics.log_metrics(capture_cold_start_metric=True)
def handler(event: dict, context: LambdaContext) -> dict:
    return dispatcher.dispatch()
