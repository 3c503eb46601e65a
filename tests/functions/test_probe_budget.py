"""The per-owner probe budget: one tick probes at most ProbesPerOwnerPerTick endpoints of one owner, skips the rest
with a recorded reason, and turns through them over the following ticks; other owners and the stack's own endpoint
are probed as usual."""

from __future__ import annotations

import datetime as dt
import json

import boto3
import time_machine

from mcp_backend.config import ProbeDispatcherSettings, load_settings
from mcp_backend.monitor.items import Endpoint
from mcp_backend.monitor.table import MonitorTable
from mcp_backend.probes.dispatcher import ProbeDispatcher
from tests.functions.test_probe_stop import RecordingCallLog
from tests.functions.test_self_probe_key import LambdaApi
from tests.instants import day_start

NOW = day_start(days_ago=1) + dt.timedelta(hours=12)  # noon yesterday: each tick it travels to is past


def register(local, owner_id: str, count: int) -> set[str]:
    """Straight into the table, past the tier's registration cap (endpoints kept from before a lower cap)."""
    table = MonitorTable(local.table_name("MonitorTable"), boto3.client("dynamodb"))
    server_ids = {f"{owner_id}-{n}" for n in range(count)}
    for server_id in server_ids:
        table.register_endpoint(
            Endpoint(server_id=server_id, owner_id=owner_id, name=server_id, url="https://e.example.com/mcp"), None
        )
    return server_ids


def dispatcher(local, budget: int, schedule: str | None = None) -> tuple[ProbeDispatcher, LambdaApi]:
    environment = {
        **local.stack.function("ProbeDispatcher").environment,
        "PROBES_PER_OWNER_PER_TICK": str(budget),
    }
    if schedule is not None:
        environment["PROBE_SCHEDULE_EXPRESSION"] = schedule
    lambda_api = LambdaApi()
    settings = load_settings(ProbeDispatcherSettings, environment)
    return ProbeDispatcher(settings, boto3.client("dynamodb"), lambda_api, call_log=RecordingCallLog()), lambda_api


def probed(lambda_api: LambdaApi) -> set[str]:
    return {json.loads(call["Payload"])["serverId"] for call in lambda_api.invocations}


def test_one_tick_probes_at_most_the_budget_of_one_owner_and_records_why_it_skipped_the_rest(local, capsys):
    # Given a budget of 3 endpoints per owner and tick; a heavy owner with 7 endpoints, a light one with 2,
    # and the stack's own endpoint
    heavy, light = register(local, "user-heavy", 7), register(local, "user-light", 2)
    register_self = MonitorTable(local.table_name("MonitorTable"), boto3.client("dynamodb"))
    register_self.register_endpoint(Endpoint(server_id="self", owner_id="stack", name="s", url="https://s/mcp"), None)
    tick, lambda_api = dispatcher(local, budget=3)

    # When the schedule ticks
    with time_machine.travel(NOW, tick=False):
        outcome = tick.dispatch()

    # Then 3 of the heavy owner's endpoints are probed, every other endpoint too, and the 4 skipped are counted
    assert len(probed(lambda_api) & heavy) == 3
    assert light | {"self"} <= probed(lambda_api)
    assert outcome == {"dispatched": 6, "failed": 0, "skippedOverBudget": 4}
    # And the log names the owner, the budget and the reason, once per owner over it
    [line] = [json.loads(line) for line in capsys.readouterr().out.splitlines() if "probe budget" in line]
    assert (line["owner_id"], line["skipped"], line["budget"], line["reason"]) == ("user-heavy", 4, 3, "probe_budget")


def test_the_ticks_turn_through_an_owners_endpoints_so_none_is_skipped_for_ever(local):
    # Given a heavy owner with 7 endpoints and a budget of 3
    heavy = register(local, "user-heavy", 7)
    seen: set[str] = set()

    # When the schedule ticks three times, a minute apart
    for minute in range(3):
        tick, lambda_api = dispatcher(local, budget=3)
        with time_machine.travel(NOW + dt.timedelta(minutes=minute), tick=False):
            tick.dispatch()
        assert len(probed(lambda_api)) == 3
        seen |= probed(lambda_api)

    # Then every one of them was probed at least once
    assert seen == heavy


def test_the_turn_follows_the_schedules_ticks_not_the_clocks_minutes(local):
    # Given a tick every 5 minutes, an owner with 5 endpoints and a budget of 4 (turning by the minute, the window
    # would move by 20 = 0 modulo 5 each tick, and the same endpoint would be skipped for ever)
    heavy = register(local, "user-heavy", 5)
    seen: set[str] = set()

    # When the schedule ticks twice, five minutes apart, each a few seconds late
    for tick_number in range(2):
        tick, lambda_api = dispatcher(local, budget=4, schedule="rate(5 minutes)")
        with time_machine.travel(NOW + dt.timedelta(minutes=5 * tick_number, seconds=3), tick=False):
            tick.dispatch()
        seen |= probed(lambda_api)

    # Then every endpoint was probed
    assert seen == heavy
