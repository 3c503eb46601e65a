"""ProbeWorker: invoked asynchronously with {serverId, endpoint}; returns the probe result. Success and
failure leave only through the function's Destinations (OnSuccess topic, OnFailure queue), so the result
travels in the envelope's responsePayload. The one thing it writes is the endpoint's failingSince, when the
endpoint starts or stops failing (the dispatcher stops probing an endpoint failing for too long).

The auth token is read here, from the endpoint item, and opened (KMS Decrypt, which only this function's
role may call) only here; it is never put into the invocation payload: the payload is the envelope's
requestPayload, which is copied to queues and alerts.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mcp_backend.config import ProbeWorkerSettings
from mcp_backend.monitor.items import ProbeStatus, probed_at_text
from mcp_backend.monitor.table import MonitorTable
from mcp_backend.netsafety import UnsafeEndpointUrl, resolve_endpoint
from mcp_backend.observability import logger
from mcp_backend.probes.client import ProbeRequest, probe
from mcp_backend.probes.endpoint_tokens import EndpointTokenCipher
from mcp_backend.probes.errors import EndpointUnregistered, ProbeFailed, ProbeRefused
from mcp_backend.tracing.propagation import TRACEPARENT, current_carrier, extract
from mcp_backend.tracing.spans import span
from mcp_backend.validation import describe_validation_error

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient


class ProbeTarget(BaseModel):
    """The invocation payload (the envelope's requestPayload): no secrets."""

    model_config = ConfigDict(populate_by_name=True, frozen=True, extra="ignore")

    server_id: str = Field(alias="serverId", min_length=1, max_length=128)
    endpoint: str = Field(min_length=1, max_length=2048)
    # The dispatcher's span (W3C), with tracing on: the probe's span continues its trace (mcp_backend.tracing).
    traceparent: str | None = Field(default=None, max_length=128)

    def payload(self) -> dict[str, str]:
        return self.model_dump(by_alias=True, exclude_none=True)


class MalformedProbeTarget(ValueError):
    """The invocation payload is not {serverId, endpoint}."""


class ProbeWorker:
    def __init__(
        self, settings: ProbeWorkerSettings, dynamodb_client: DynamoDBClient | None = None, kms_client: Any = None
    ) -> None:
        self.settings = settings
        self.table = MonitorTable.from_settings(settings, dynamodb_client)
        self.cipher = EndpointTokenCipher(settings.endpoint_token_key_id, kms_client)

    def handle(self, event: Any) -> dict[str, Any]:
        try:
            target = ProbeTarget.model_validate(event)
        except ValidationError as error:
            raise MalformedProbeTarget(f"not a probe target: {describe_validation_error(error)}") from None
        logger.append_keys(server_id=target.server_id)
        with span(
            "probe endpoint",
            kind="consumer",
            parent=extract({TRACEPARENT: target.traceparent}),
            attributes={"probe.server_id": target.server_id},
        ):
            # With tracing on, the result (the envelope's responsePayload) carries this span on to the recorder.
            return {**self._probe(target), **current_carrier()}

    def _probe(self, target: ProbeTarget) -> dict[str, Any]:
        import anyio

        # The registered URL, not the payload's: an endpoint's token is only ever sent where it was registered.
        url, auth_token = self._registered(target.server_id)
        try:
            # The addresses checked here are the ones the probe connects to (no second DNS answer).
            _, addresses = resolve_endpoint(url, allow_loopback_hosts=self.settings.probe_allow_loopback_hosts)
        except UnsafeEndpointUrl as error:
            self._record_outcome(target.server_id, failing=True)
            raise ProbeRefused(f"endpoint {target.server_id}: {error}") from None
        request = ProbeRequest(
            server_id=target.server_id,
            url=url,
            auth_token=auth_token,
            timeout_seconds=self.settings.probe_timeout_seconds,
            degraded_latency_ms=self.settings.probe_degraded_latency_ms,
            addresses=tuple(addresses),
            mode=self.settings.probe_mode,
        )
        try:
            result = anyio.run(probe, request)
        except ProbeFailed:
            self._record_outcome(target.server_id, failing=True)
            raise
        self._record_outcome(target.server_id, failing=result["status"] == ProbeStatus.ERROR)
        logger.info(
            "probe finished",
            extra={"status": result["status"], "latency_ms": result["latencyMs"], "tool_count": result["toolCount"]},
        )
        return result

    def _record_outcome(self, server_id: str, failing: bool) -> None:
        """Keep the endpoint's failingSince (the dispatcher stops probing it after the configured days).
        Only a change writes anything; a failed write never fails the probe, whose result still goes out."""
        try:
            if failing:
                self.table.mark_failing(server_id, probed_at_text(datetime.now(UTC)))
            else:
                self.table.mark_passing(server_id)
        except Exception as error:  # noqa: BLE001 - the next probe records it
            logger.warning("probe outcome not recorded", extra={"error_type": type(error).__name__})

    def _registered(self, server_id: str) -> tuple[str, str | None]:
        target = self.table.probe_target(server_id)
        if target is None:
            raise EndpointUnregistered(f"endpoint {server_id} is no longer registered")
        url, owner_id, sealed = target
        return url, self.cipher.open(server_id, owner_id, sealed) if sealed else None
