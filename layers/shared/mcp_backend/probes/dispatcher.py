"""ProbeDispatcher: on each schedule tick, one asynchronous ProbeWorker invocation per registered
endpoint (InvocationType Event, so the worker's retries, max event age and Destinations apply).

It reads the registry with one Query of its own index (endpoints and their probe state; never a Scan, so
stored probe results never add to a tick's reads) and stops probing endpoints that fail too long; the stack's
own endpoint, and its key, are registered once at deploy (probes/self_probe.py). One owner gets at most its
budget of probes a tick (ProbesPerOwnerPerTick), taken in turn across ticks, so no tenant's endpoints crowd out
the others' under ProbeWorker's reserved concurrency.
"""

from __future__ import annotations

import json
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from aws_lambda_powertools.metrics import MetricUnit

from mcp_backend.aws import client_or_lazy
from mcp_backend.calllog.models import CallLogEventType, CallLogRecord
from mcp_backend.calllog.writer import CallLogWriter
from mcp_backend.config import ProbeDispatcherSettings
from mcp_backend.monitor.items import Endpoint, probed_at_text
from mcp_backend.monitor.table import MonitorTable
from mcp_backend.observability import logger, metrics
from mcp_backend.probes.registry import SELF_SERVER_ID, EndpointRegistry
from mcp_backend.probes.worker import ProbeTarget
from mcp_backend.tracing.propagation import TRACEPARENT, current_carrier
from mcp_backend.tracing.spans import span

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_lambda import LambdaClient


class ProbeDispatcher:
    def __init__(
        self,
        settings: ProbeDispatcherSettings,
        dynamodb_client: DynamoDBClient | None = None,
        lambda_client: LambdaClient | None = None,
        call_log: CallLogWriter | None = None,
    ) -> None:
        self.settings = settings
        self.registry = EndpointRegistry(MonitorTable.from_settings(settings, dynamodb_client))
        self._lambda = client_or_lazy(lambda_client, "lambda")
        self.call_log = call_log or CallLogWriter(settings.call_log_stream_name)

    def _probed(self, endpoints: list[Endpoint]) -> list[Endpoint]:
        """The endpoints to probe this tick: not those whose probes stopped, nor those failing for longer than
        the configured days, which stop now (one probes_stopped call-log record, which the analyzer alerts on;
        the stack's own never stops)."""
        now = datetime.now(UTC)
        cutoff = probed_at_text(now - timedelta(days=self.settings.probe_stop_after_failing_days))
        probed = []
        for endpoint in endpoints:
            if endpoint.probes_stopped_at is not None:
                continue
            if endpoint.server_id != SELF_SERVER_ID and (endpoint.failing_since or "\uffff") < cutoff:
                owner = self.registry.stop_probes(endpoint.server_id, cutoff, probed_at_text(now))
                if owner is not None:
                    self._notify_stopped(owner, endpoint.server_id)
                continue
            probed.append(endpoint)
        return probed

    def _within_budget(self, endpoints: list[Endpoint], now: datetime) -> tuple[list[Endpoint], int]:
        """At most the budget of each owner's endpoints, and how many were skipped. Which ones turns with the
        schedule's ticks (a window of the owner's endpoints, in server-id order, moved on by the budget each tick;
        the tick's number is the time over the schedule's spacing, rounded, so a late tick keeps its number), so
        over ceil(endpoints / budget) ticks each of them is probed; the stack's own endpoint is never counted."""
        budget = self.settings.probes_per_owner_per_tick
        by_owner: dict[str, list[Endpoint]] = defaultdict(list)
        for endpoint in endpoints:
            by_owner[endpoint.owner_id].append(endpoint)
        tick = round(now.timestamp() / self.settings.tick_seconds)
        kept: list[Endpoint] = []
        skipped = 0
        for owner_id, owned in by_owner.items():
            if len(owned) <= budget or any(endpoint.server_id == SELF_SERVER_ID for endpoint in owned):
                kept += owned
                continue
            owned.sort(key=lambda endpoint: endpoint.server_id)
            start = tick * budget % len(owned)
            kept += [owned[(start + n) % len(owned)] for n in range(budget)]
            skipped += len(owned) - budget
            logger.warning(
                "probe budget: endpoints skipped this tick",
                extra={
                    "owner_id": owner_id,
                    "reason": "probe_budget",
                    "skipped": len(owned) - budget,
                    "budget": budget,
                },
            )
        return kept, skipped

    def _notify_stopped(self, owner_id: str, server_id: str) -> None:
        logger.info("probes stopped: failing too long", extra={"server_id": server_id, "owner_id": owner_id})
        metrics.add_metric(name="ProbesStopped", unit=MetricUnit.Count, value=1)
        self.call_log.put(
            [CallLogRecord(event_type=CallLogEventType.PROBES_STOPPED, user_id=owner_id, server_id=server_id)]
        )

    def dispatch(self) -> dict[str, int]:
        with span("dispatch probes"):
            return self._dispatch()

    def _dispatch(self) -> dict[str, int]:
        dispatched = failed = 0
        endpoints, skipped = self._within_budget(self._probed(list(self.registry.all_endpoints())), datetime.now(UTC))
        for endpoint in endpoints:
            try:
                # One producer span per probe; the probe's payload carries it (the worker continues the trace).
                with span("invoke ProbeWorker", kind="producer", attributes={"probe.server_id": endpoint.server_id}):
                    target = ProbeTarget(
                        server_id=endpoint.server_id,
                        endpoint=endpoint.url,
                        traceparent=current_carrier().get(TRACEPARENT),
                    )
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
        if skipped:
            metrics.add_metric(name="ProbesSkippedOverBudget", unit=MetricUnit.Count, value=skipped)
        if failed:
            # Not raised: a retried tick would probe every other endpoint twice. The next tick comes soon.
            metrics.add_metric(name="ProbeDispatchFailures", unit=MetricUnit.Count, value=failed)
        return {"dispatched": dispatched, "failed": failed, "skippedOverBudget": skipped}
