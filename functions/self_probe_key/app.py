"""SelfProbeKeyIssuer: the SelfProbeKey custom resource; issues the self-probe's key once, at deploy."""

from aws_lambda_powertools.utilities.typing import LambdaContext

from mcp_backend.config import SelfProbeKeySettings, load_settings
from mcp_backend.custom_resource import respond_to_cloudformation
from mcp_backend.observability import instrumented_handler
from mcp_backend.probes.self_probe import SelfProbeKeys

keys = SelfProbeKeys(load_settings(SelfProbeKeySettings))


@instrumented_handler()
def handler(event: dict, context: LambdaContext) -> dict:
    return {"status": respond_to_cloudformation(event, keys.handle)}
