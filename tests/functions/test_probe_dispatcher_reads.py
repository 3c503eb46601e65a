"""What a ProbeDispatcher tick reads from MonitorTable (the template's, on moto): registered endpoints from their
own sparse index, never a Scan, and never more because probe results pile up in the table."""

from __future__ import annotations

import datetime as dt
import json

import boto3

from mcp_backend.config import ProbeDispatcherSettings, load_settings
from mcp_backend.monitor.items import Endpoint, probe_result_item
from mcp_backend.monitor.table import MonitorTable
from mcp_backend.probes.dispatcher import ProbeDispatcher
from tests.functions.test_probe_stop import RecordingCallLog
from tests.functions.test_self_probe_key import LambdaApi


class CountedDynamoDB:
    """The moto DynamoDB client, with every operation it is asked for and the items each answer says it read."""

    def __init__(self) -> None:
        self.client = boto3.client("dynamodb")
        self.operations: list[str] = []
        self.items_read = 0
        self.client.meta.events.register("before-call.dynamodb.*", self._before)
        self.client.meta.events.register("after-call.dynamodb.*", self._after)

    def _before(self, model, **_) -> None:
        self.operations.append(model.name)

    def _after(self, parsed, **_) -> None:
        # ScannedCount: what a Query or Scan read (and billed), before any filter.
        self.items_read += int(parsed.get("ScannedCount", 0))


def register(local, count: int) -> list[str]:
    table = MonitorTable(local.table_name("MonitorTable"), boto3.client("dynamodb"))
    server_ids = [f"srv-{n}" for n in range(count)]
    for server_id in server_ids:
        endpoint = Endpoint(server_id=server_id, owner_id="user-alice", name=server_id, url="http://127.0.0.1:9/mcp")
        table.register_endpoint(endpoint, None)
    return server_ids


def store_results(local, server_ids: list[str], per_endpoint: int) -> None:
    table = MonitorTable(local.table_name("MonitorTable"), boto3.client("dynamodb"))
    start = dt.datetime.now(dt.UTC)
    items = [
        probe_result_item(
            {"serverId": server_id, "status": "healthy", "latencyMs": 12},
            probe_id=f"p{n}",
            probed_at=start - dt.timedelta(minutes=n),
            expires_at=int(start.timestamp()) + 86400,
        )
        for server_id in server_ids
        for n in range(per_endpoint)
    ]
    assert table.put_probe_results(items) == set()


def tick(local) -> tuple[CountedDynamoDB, list[str]]:
    environment = {**local.stack.function("ProbeDispatcher").environment, "API_KEYS_SECRET_ID": ""}
    dynamodb, lambda_api = CountedDynamoDB(), LambdaApi()
    settings = load_settings(ProbeDispatcherSettings, environment)
    ProbeDispatcher(settings, dynamodb.client, lambda_api, call_log=RecordingCallLog()).dispatch()
    return dynamodb, sorted(json.loads(call["Payload"])["serverId"] for call in lambda_api.invocations)


def test_a_tick_queries_the_registered_endpoints_and_never_scans(local):
    # Given three registered endpoints
    server_ids = register(local, 3)

    # When the dispatcher ticks
    dynamodb, probed = tick(local)

    # Then it probed each, having made one Query of MonitorTable and nothing else (no Scan, no per-endpoint read)
    assert probed == server_ids
    assert dynamodb.operations == ["Query"]
    assert dynamodb.items_read == 3


def test_stored_probe_results_do_not_add_to_what_a_tick_reads(local):
    # Given three registered endpoints, read once by a tick
    server_ids = register(local, 3)
    before, _ = tick(local)

    # When 200 probe results of each are stored in the same table
    store_results(local, server_ids, 200)
    after, probed = tick(local)

    # Then the next tick reads exactly what it read before: the three endpoints
    assert probed == server_ids
    assert after.operations == before.operations == ["Query"]
    assert after.items_read == before.items_read == 3
