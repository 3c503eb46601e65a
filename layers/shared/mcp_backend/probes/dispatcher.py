"""ProbeDispatcher: on each schedule tick, one asynchronous ProbeWorker invocation per registered
endpoint (InvocationType Event, so the worker's retries, max event age and Destinations apply).

First run: the stack's own MCP endpoint is registered (conditional write, a no-op afterwards).
"""

from __future__ import annotations

import json
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit

from mcp_backend.api_keys import add_api_key
from mcp_backend.aws import client_or_lazy
from mcp_backend.config import ProbeDispatcherSettings
from mcp_backend.monitor.table import MonitorTable
from mcp_backend.observability import logger, metrics
from mcp_backend.probes.endpoint_tokens import EndpointTokenCipher
from mcp_backend.probes.registry import EndpointRegistry
from mcp_backend.probes.worker import ProbeTarget


class ProbeDispatcher:
    def __init__(
        self,
        settings: ProbeDispatcherSettings,
        dynamodb_client: Any = None,
        lambda_client: Any = None,
        secrets_client: Any = None,
        kms_client: Any = None,
    ) -> None:
        self.settings = settings
        cipher = EndpointTokenCipher(settings.endpoint_token_key_id, kms_client)
        self.registry = EndpointRegistry(MonitorTable.from_settings(settings, dynamodb_client), cipher)
        self._lambda = client_or_lazy(lambda_client, "lambda")
        self._secrets = client_or_lazy(secrets_client, "secretsmanager")
        # No key to seal the self-probe's API key with: no key is issued and the own endpoint is not probed.
        self._self_registered = not (
            settings.self_function_name and settings.api_keys_secret_id and settings.endpoint_token_key_id
        )

    def _register_self(self) -> None:
        """First run: register the stack's own endpoint (its Function URL), once per container at most."""
        if self._self_registered:
            return
        if self.registry.self_registered():
            self._self_registered = True
            return
        try:
            url = self._lambda.get_function_url_config(
                FunctionName=self.settings.self_function_name, Qualifier=self.settings.self_function_qualifier
            )["FunctionUrl"]
        except Exception as error:  # noqa: BLE001 - no URL (e.g. the local stack): probe the others anyway
            logger.warning("own Function URL not readable; not registered", extra={"error_type": type(error).__name__})
            self._self_registered = True
            return
        # Claim first, then issue the key: a tick that loses the race issues nothing.
        if self.registry.ensure_self(url.rstrip("/") + self.settings.mcp_path):
            self.registry.set_self_token(self._issue_self_probe_key())
            logger.info("registered the stack's own MCP endpoint")
        self._self_registered = True

    def _issue_self_probe_key(self) -> str:
        """A new internal key in the API key secret (user "self-probe"), so the stack's own endpoint is
        probed authenticated from the first deploy on; it is stored only sealed, in the `self` item."""
        return add_api_key(
            self._secrets, self.settings.api_keys_secret_id, user_id="self-probe", tier="internal", allow_reserved=True
        )

    def dispatch(self) -> dict[str, int]:
        self._register_self()
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
