"""ProbeDispatcher: on each schedule tick, one asynchronous ProbeWorker invocation per registered endpoint."""

from aws_lambda_powertools.utilities.typing import LambdaContext

from mcp_backend.config import ProbeDispatcherSettings, load_settings
from mcp_backend.observability import instrumented_handler
from mcp_backend.probes.dispatcher import ProbeDispatcher

dispatcher = ProbeDispatcher(load_settings(ProbeDispatcherSettings))


@instrumented_handler()
def handler(event: dict, context: LambdaContext) -> dict:
    return dispatcher.dispatch()
