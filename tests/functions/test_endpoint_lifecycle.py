"""Registered endpoints against the template's MonitorTable on moto: the per-tier cap (a refused registration
writes nothing), unregister_endpoint (owner only; probes and alerts stop)."""

from __future__ import annotations

import copy
import json

import boto3
import pytest

from mcp_backend.config import ProbeDispatcherSettings, load_settings
from mcp_backend.monitor.table import MonitorTable
from mcp_backend.probes.dispatcher import ProbeDispatcher
from mcp_backend.probes.errors import EndpointUnregistered
from mcp_backend.probes.registry import EndpointRegistry
from mcp_backend.quotas import EndpointQuota, QuotaExceeded
from tests.conftest import load_event
from tests.functions.test_probe_consumers import alert_observer, received
from tests.functions.test_probe_worker_target import register_and_load_worker
from tests.functions.test_self_probe_key import LambdaApi

FREE = EndpointQuota("free", 2)


@pytest.fixture
def registry(local) -> EndpointRegistry:
    return EndpointRegistry(MonitorTable(local.table_name("MonitorTable"), boto3.client("dynamodb")))


def endpoint_items(local) -> list[dict]:
    items = boto3.client("dynamodb").scan(TableName=local.table_name("MonitorTable"))["Items"]
    return [item for item in items if item["sortKey"]["S"] == "endpoint"]


def register(registry: EndpointRegistry, owner: str, n: int) -> str:
    return registry.register(owner, f"https://mcp{n}.example.com/mcp", f"e{n}", None, FREE)["serverId"]


def dispatched(local) -> list[str]:
    environment = {**local.stack.function("ProbeDispatcher").environment, "API_KEYS_SECRET_ID": ""}
    lambda_api = LambdaApi()
    settings = load_settings(ProbeDispatcherSettings, environment)
    ProbeDispatcher(settings, boto3.client("dynamodb"), lambda_api).dispatch()
    return [json.loads(call["Payload"])["serverId"] for call in lambda_api.invocations]


def test_a_registration_over_the_tiers_cap_is_refused_and_writes_nothing(local, registry):
    # Given a free-tier owner with its 2 endpoints registered
    held = [register(registry, "user-a", n) for n in range(2)]

    # When it registers a third
    with pytest.raises(QuotaExceeded) as refused:
        register(registry, "user-a", 3)

    # Then the error names the limit, the tier and the way out, and no third endpoint exists or is probed
    assert str(refused.value) == (
        "endpoints limit of 2 for tier free reached; unregister one (unregister_endpoint) to register another"
    )
    assert sorted(item["serverId"]["S"] for item in endpoint_items(local)) == sorted(held)
    assert sorted(dispatched(local)) == sorted(held)

    # And re-registering one it has is not a new endpoint; another owner has its own cap
    assert register(registry, "user-a", 0) == held[0]
    register(registry, "user-b", 3)


def test_the_owner_unregisters_and_its_probes_stop_and_its_slot_frees(local, registry):
    # Given an owner at its cap of 2
    first, second = (register(registry, "user-a", n) for n in range(2))

    # When it unregisters one
    assert registry.unregister("user-a", first)

    # Then it is gone from its list and from the dispatcher's tick, and a new registration fits
    assert [e["serverId"] for e in registry.list_for("user-a")] == [second]
    assert dispatched(local) == [second]
    register(registry, "user-a", 5)


def test_another_principal_cannot_unregister_an_endpoint(local, registry):
    # Given alice's endpoint
    server_id = register(registry, "user-a", 0)

    # When bob tries to unregister it
    refused = registry.unregister("user-b", server_id)

    # Then nothing changed (the tool answers "not found": see the e2e test)
    assert refused is False
    assert [e["serverId"] for e in registry.list_for("user-a")] == [server_id]


def test_a_probe_in_flight_for_an_unregistered_endpoint_raises_and_alerts_nobody(local):
    # Given an endpoint unregistered after its probe was dispatched
    worker = register_and_load_worker(local, "srv-gone", "https://mcp.example.com/mcp", None)
    boto3.client("dynamodb").delete_item(
        TableName=local.table_name("MonitorTable"), Key={"serverId": {"S": "srv-gone"}, "sortKey": {"S": "endpoint"}}
    )
    with pytest.raises(EndpointUnregistered):
        worker.handle({"serverId": "srv-gone", "endpoint": "https://mcp.example.com/mcp"})

    # When its OnFailure envelope reaches the AlertHandler
    observer = alert_observer(local)
    event = copy.deepcopy(load_event("alert_handler/failure-unreachable.json"))
    body = json.loads(event["Records"][0]["body"])
    body["responsePayload"] = {"errorType": "EndpointUnregistered", "errorMessage": "endpoint srv-gone is gone"}
    event["Records"][0]["body"] = json.dumps(body)
    response = local.invoke("AlertHandler", event)

    # Then the record succeeds and no alert is published
    assert response == {"batchItemFailures": []}
    assert received(observer) == []
