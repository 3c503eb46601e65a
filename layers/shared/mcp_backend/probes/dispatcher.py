"""ProbeDispatcher: on each schedule tick, one asynchronous ProbeWorker invocation per registered
endpoint (InvocationType Event, so the worker's retries, max event age and Destinations apply).

It only reads the registry: the stack's own endpoint, and its key, are registered once at deploy
(probes/self_probe.py).
"""

from __future__ import annotations

import json
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit

from mcp_backend.aws import client_or_lazy
from mcp_backend.config import ProbeDispatcherSettings
from mcp_backend.monitor.table import MonitorTable
from mcp_backend.observability import logger, metrics
from mcp_backend.probes.registry import EndpointRegistry
from mcp_backend.probes.worker import ProbeTarget


class ProbeDispatcher:
    def __init__(self, settings: ProbeDispatcherSettings, dynamodb_client: Any = None, lambda_client: Any = None):
        self.settings = settings
        self.registry = EndpointRegistry(MonitorTable.from_settings(settings, dynamodb_client))
        self._lambda = client_or_lazy(lambda_client, "lambda")

    def dispatch(self) -> dict[str, int]:
        dispatched = failed = 0
        for endpoint in self.registry.all_endpoints():
            target = ProbeTarget(server_id=endpoint.server_id, endpoint=endpoint.url)
            try:
                self._lambda.invoke(
                    FunctionName=self.settings.probe_worker_function_name,
                    InvocationType="Event",
                    Payload=json.dumps(target.payload()).encode(),
                )
            except Exception as error:  # noqa: BLE001 - one endpoint's failed dispatch must not stop the rest
                failed += 1
                logger.error(
                    "probe not dispatched", extra={"server_id": endpoint.server_id, "error_type": type(error).__name__}
                )
            else:
                dispatched += 1
        metrics.add_metric(name="ProbesDispatched", unit=MetricUnit.Count, value=dispatched)
        if failed:
            # Not raised: a retried tick would probe every other endpoint twice. The next tick comes soon.
            metrics.add_metric(name="ProbeDispatchFailures", unit=MetricUnit.Count, value=failed)
        return {"dispatched": dispatched, "failed": failed}
