"""Probes stop for an endpoint failing for the configured days: the worker keeps failingSince, the dispatcher
stops the endpoint once with one notice to its owner's call log, and a re-registration resumes it."""

from __future__ import annotations

import datetime as dt
import json

import boto3
import pytest
import time_machine

from mcp_backend.calllog.models import CallLogEventType
from mcp_backend.config import ProbeDispatcherSettings, load_settings
from mcp_backend.monitor.items import probed_at_text
from mcp_backend.monitor.table import MonitorTable
from mcp_backend.probes import worker as worker_module
from mcp_backend.probes.dispatcher import ProbeDispatcher
from mcp_backend.probes.errors import ProbeFailed
from mcp_backend.probes.registry import EndpointRegistry
from tests.functions.test_probe_worker_target import recording_server, register_and_load_worker
from tests.functions.test_self_probe_key import LambdaApi
from tests.instants import day_start

NOW = day_start(days_ago=2) + dt.timedelta(hours=12)  # noon two days ago: a day later is still past


class RecordingCallLog:
    def __init__(self) -> None:
        self.records: list = []

    def put(self, records) -> None:
        self.records.extend(records)


@pytest.fixture
def table(local) -> MonitorTable:
    return MonitorTable(local.table_name("MonitorTable"), boto3.client("dynamodb"))


def endpoint_item(local, server_id: str) -> dict:
    return boto3.client("dynamodb").get_item(
        TableName=local.table_name("MonitorTable"), Key={"serverId": {"S": server_id}, "sortKey": {"S": "endpoint"}}
    )["Item"]


def tick(local, call_log: RecordingCallLog) -> list[str]:
    environment = {**local.stack.function("ProbeDispatcher").environment, "API_KEYS_SECRET_ID": ""}
    lambda_api = LambdaApi()
    settings = load_settings(ProbeDispatcherSettings, environment)
    ProbeDispatcher(settings, boto3.client("dynamodb"), lambda_api, call_log=call_log).dispatch()
    return sorted(json.loads(call["Payload"])["serverId"] for call in lambda_api.invocations)


def test_the_worker_keeps_failing_since_from_the_first_failure_until_a_pass(local, monkeypatch):
    # Given an endpoint that answers 404
    seen: list = []
    server = recording_server("127.0.0.1", 0, seen)
    url = f"http://127.0.0.1:{server.server_address[1]}/mcp"
    worker = register_and_load_worker(local, "srv-1", url, None)
    try:
        # When it is probed twice a day apart
        for moment in (NOW, NOW + dt.timedelta(days=1)):
            with time_machine.travel(moment, tick=False), pytest.raises(ProbeFailed):
                worker.handle({"serverId": "srv-1", "endpoint": url})
    finally:
        server.shutdown()
        server.server_close()

    # Then it is failing since the first failure
    assert endpoint_item(local, "srv-1")["failingSince"]["S"] == probed_at_text(NOW)

    # When a probe passes
    async def healthy(request):
        return {"serverId": request.server_id, "status": "healthy", "latencyMs": 5, "toolCount": 1}

    monkeypatch.setattr(worker_module, "probe", healthy)
    worker.handle({"serverId": "srv-1", "endpoint": url})

    # Then it is no longer failing
    assert "failingSince" not in endpoint_item(local, "srv-1")


def test_an_endpoint_failing_for_the_configured_days_stops_once_with_one_notice(local, table):
    # Given the default of 7 days; one endpoint failing for 8 days, one for 1 day, one healthy
    registry = EndpointRegistry(table)
    ids = {
        name: registry.register("user-a", f"https://{name}.example.com/mcp", name, None)["serverId"]
        for name in ("old", "new", "ok")
    }
    table.mark_failing(ids["old"], probed_at_text(NOW - dt.timedelta(days=8, hours=1)))
    table.mark_failing(ids["new"], probed_at_text(NOW - dt.timedelta(days=1)))
    call_log = RecordingCallLog()

    # When the schedule ticks twice
    with time_machine.travel(NOW, tick=False):
        first, second = tick(local, call_log), tick(local, call_log)

    # Then the old one is probed by neither tick, the others by both; its owner got exactly one notice
    assert first == second == sorted([ids["new"], ids["ok"]])
    [notice] = call_log.records
    assert (notice.event_type, notice.user_id, notice.server_id) == (
        CallLogEventType.PROBES_STOPPED,
        "user-a",
        ids["old"],
    )
    # And endpoint_status tells its owner when
    assert registry.status("user-a", ids["old"], 86400)["probesStoppedAt"] == probed_at_text(NOW)

    # When its owner registers it again, it is probed again
    registry.register("user-a", "https://old.example.com/mcp", "old", None)
    with time_machine.travel(NOW, tick=False):
        assert ids["old"] in tick(local, call_log)


class UnreadableState:
    """The real (moto) DynamoDB client, except that BatchGetItem fails (throttled)."""

    def __init__(self) -> None:
        self._client = boto3.client("dynamodb")

    def batch_get_item(self, **request):
        raise self._client.exceptions.ProvisionedThroughputExceededException(
            {"Error": {"Code": "ProvisionedThroughputExceededException", "Message": "slow down"}}, "BatchGetItem"
        )

    def __getattr__(self, name: str):
        return getattr(self._client, name)


def test_a_tick_that_cannot_read_the_failure_state_still_probes_every_endpoint(local, table):
    # Given two registered endpoints, and BatchGetItem failing
    registry = EndpointRegistry(table)
    ids = sorted(registry.register("user-a", f"https://e{n}.example.com/mcp", "e", None)["serverId"] for n in range(2))
    environment = {**local.stack.function("ProbeDispatcher").environment, "API_KEYS_SECRET_ID": ""}
    lambda_api = LambdaApi()
    dispatcher = ProbeDispatcher(
        load_settings(ProbeDispatcherSettings, environment), UnreadableState(), lambda_api, call_log=RecordingCallLog()
    )

    # When the schedule ticks
    outcome = dispatcher.dispatch()

    # Then both are probed
    assert outcome == {"dispatched": 2, "failed": 0, "skippedOverBudget": 0}
    assert sorted(json.loads(call["Payload"])["serverId"] for call in lambda_api.invocations) == ids
