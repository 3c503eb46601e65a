"""AlertHandler: envelopes from ProbeAlertQueue (successful probes the ESM filter let through: status
error, or degraded slower than 5 s) and ProbeFailureQueue (OnFailure: the probe raised) become one
AlertTopic message per endpoint and incident window.

Run-once key: f"{serverId}#{windowStart}", windowStart being the envelope's timestamp floored to the
incident window (a parameter). The key comes from the envelope, not the clock, so a redelivered message
maps to the same incident; the first envelope of a window publishes, the rest are suppressed.
"""

from __future__ import annotations

import json
from datetime import UTC
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from mcp_backend.aws import client_or_lazy
from mcp_backend.config import AlertHandlerSettings
from mcp_backend.idempotency import run_once_or_none
from mcp_backend.monitor.items import ProbeStatus
from mcp_backend.observability import logger, metrics
from mcp_backend.probes.envelope import DestinationEnvelope, MalformedEnvelope
from mcp_backend.probes.errors import EndpointUnregistered

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_sns import SNSClient

ERROR_MESSAGE_CHARS = 500


class AlertHandler:
    def __init__(
        self,
        settings: AlertHandlerSettings,
        sns_client: SNSClient | None = None,
        *,
        idempotent: bool = True,
        idempotency_client: DynamoDBClient | None = None,
    ) -> None:
        sns_client = client_or_lazy(sns_client, "sns")
        self.settings = settings
        self._sns = sns_client
        self._once = run_once_or_none(
            self._publish,
            settings,
            data_keyword_argument="incident",
            key_jmespath="key",
            idempotent=idempotent,
            client=idempotency_client,
            # An incident key must outlive its window, or a late redelivery would alert again.
            ttl_seconds=max(settings.idempotency_ttl_seconds, settings.alert_incident_window_seconds),
        )

    # BatchConsumer protocol (mcp_backend.batch.handle_batch)
    def start_invocation(self, lambda_context: Any) -> None:
        if self._once is not None:
            self._once.start_invocation(lambda_context)

    def finish_invocation(self) -> None:
        """Nothing: each record publishes (or is suppressed) on its own."""

    def process(self, record: SQSRecord) -> dict[str, Any]:
        """Record handler: raises on a malformed envelope or a failed publish (the record is retried)."""
        envelope = DestinationEnvelope.from_body(record.body)
        incident = self.incident(envelope)
        if incident is None:
            logger.debug("envelope is not alert-worthy", extra={"server_id": envelope.server_id})
            return {"alerted": False}
        logger.append_keys(server_id=envelope.server_id)
        if self._once is None:
            return self._publish(incident=incident)
        return self._once(incident=incident)

    def incident(self, envelope: DestinationEnvelope) -> dict[str, Any] | None:
        """What the alert says, or None for a result the filter should have kept out (healthy, fast degraded)."""
        window = self.settings.alert_incident_window_seconds
        moment = int(envelope.timestamp.astimezone(UTC).timestamp())
        window_start = moment - moment % window
        context = envelope.request_context
        incident: dict[str, Any] = {
            "key": f"{envelope.server_id}#{window_start}",
            "serverId": envelope.server_id,
            "endpoint": envelope.request_payload.endpoint,
            "windowStart": window_start,
            "windowSeconds": window,
            "condition": context.condition,
            "approximateInvokeCount": context.approximate_invoke_count,
            "requestId": context.request_id,
            "timestamp": envelope.timestamp.isoformat(),
        }
        payload = envelope.response_payload or {}
        if not envelope.succeeded and payload.get("errorType") == EndpointUnregistered.__name__:
            return None  # unregistered while its probe was in flight: its owner asked for no more alerts
        if envelope.succeeded:
            status = payload.get("status")
            if status not in (ProbeStatus.ERROR, ProbeStatus.DEGRADED):
                return None
            incident |= {"alert": f"probe_{status}", "status": status, "latencyMs": payload.get("latencyMs")}
            if payload.get("error"):
                incident["error"] = _rpc_error_view(payload["error"])
        else:
            incident |= {
                "alert": "probe_failed",
                "status": "failed",
                "error": {
                    "errorType": str(payload.get("errorType", "Unknown")),
                    # Text the probed endpoint may control: printable characters only, bounded.
                    "errorMessage": _printable(str(payload.get("errorMessage", "")))[:ERROR_MESSAGE_CHARS],
                },
            }
        return incident

    def _publish(self, *, incident: dict[str, Any]) -> dict[str, Any]:
        env = self.settings.environment
        subject = f"[{env}] MCP endpoint {incident['serverId']}: {incident['alert']} ({incident['condition']})"
        self._sns.publish(
            TopicArn=self.settings.alert_topic_arn,
            Subject=subject[:100],
            Message=json.dumps({"environment": env, **incident}, sort_keys=True, default=str),
            MessageAttributes={"alert": {"DataType": "String", "StringValue": incident["alert"]}},
        )
        metrics.add_metric(name="ProbeAlertsPublished", unit=MetricUnit.Count, value=1)
        logger.info(
            "probe alert published", extra={"alert": incident["alert"], "window_start": incident["windowStart"]}
        )
        return {"alerted": True, "key": incident["key"]}


__all__ = ["AlertHandler", "MalformedEnvelope"]


def _rpc_error_view(error: Any) -> dict[str, Any]:
    """The endpoint's JSON-RPC error as an alert may carry it: an integer code, and its message (text the
    endpoint controls) printable and bounded; nothing else it sent."""
    error = error if isinstance(error, dict) else {}
    code = error.get("code")
    return {
        "code": code if isinstance(code, int) and not isinstance(code, bool) else None,
        "message": _printable(str(error.get("message", "")))[:ERROR_MESSAGE_CHARS],
    }


def _printable(text: str) -> str:
    return "".join(character if character.isprintable() else " " for character in text)
