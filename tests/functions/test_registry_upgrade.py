"""A stack upgraded from one whose endpoint items predate the RegisteredEndpoints index: until they carry the
index's key the dispatcher never sees them, so the one-off upgrade command adds it (the template's MonitorTable,
on moto)."""

from __future__ import annotations

import datetime as dt

import boto3

from mcp_backend.monitor.items import REGISTRY_ATTRIBUTE, Endpoint, key, probe_result_item
from mcp_backend.monitor.table import MonitorTable
from mcp_backend.monitor.upgrade import main


def old_endpoint(table_name: str, server_id: str) -> None:
    """An endpoint item as the stack wrote it before the index: everything but the index's key."""
    endpoint = Endpoint(server_id=server_id, owner_id="user-alice", name=server_id, url="https://example.com/mcp")
    MonitorTable(table_name, boto3.client("dynamodb")).register_endpoint(endpoint, None)
    boto3.client("dynamodb").update_item(
        TableName=table_name, Key=key(server_id, "endpoint"), UpdateExpression=f"REMOVE {REGISTRY_ATTRIBUTE}"
    )


def test_endpoints_written_before_the_index_are_indexed_once_and_nothing_else_is(local, capsys):
    # Given two endpoints stored before the index existed, one stored after it, and a probe result
    table_name = local.table_name("MonitorTable")
    table = MonitorTable(table_name, boto3.client("dynamodb"))
    old_endpoint(table_name, "srv-old-1")
    old_endpoint(table_name, "srv-old-2")
    table.register_endpoint(
        Endpoint(server_id="srv-new", owner_id="user-bob", name="new", url="https://example.org/mcp"), None
    )
    now = dt.datetime.now(dt.UTC)
    result = probe_result_item(
        {"serverId": "srv-old-1", "status": "healthy"},
        probe_id="p1",
        probed_at=now,
        expires_at=int(now.timestamp()) + 60,
    )
    assert table.put_probe_results([result]) == set()
    assert {e.server_id for e in table.registered_endpoints()} == {"srv-new"}

    # When the upgrade command runs, twice
    assert main(["--table", table_name]) == 0
    first = capsys.readouterr().out
    assert main(["--table", table_name]) == 0
    second = capsys.readouterr().out

    # Then the dispatcher's index holds every registered endpoint; the second run found nothing to do
    assert {e.server_id for e in table.registered_endpoints()} == {"srv-old-1", "srv-old-2", "srv-new"}
    assert "2 endpoints indexed" in first and "0 endpoints indexed" in second
    # and the probe result did not join the index
    stored = boto3.client("dynamodb").get_item(TableName=table_name, Key=key("srv-old-1", result["sortKey"]["S"]))
    assert REGISTRY_ATTRIBUTE not in stored["Item"]


def test_an_endpoint_deleted_during_the_upgrade_is_not_brought_back(local):
    # Given an old endpoint the upgrade has read, and that its owner deletes before the upgrade writes
    table_name = local.table_name("MonitorTable")
    table = MonitorTable(table_name, boto3.client("dynamodb"))
    old_endpoint(table_name, "srv-gone")
    [found] = list(table.unindexed_endpoint_ids())
    assert table.delete_endpoint("srv-gone", "user-alice")

    # When the upgrade indexes what it read
    indexed = table.index_endpoint(found)

    # Then nothing was written: no half item appears in the table or the index
    assert indexed is False
    assert boto3.client("dynamodb").get_item(TableName=table_name, Key=key("srv-gone", "endpoint")).get("Item") is None
    assert list(table.registered_endpoints()) == []
