"""One owner module per DynamoDB table: only an owner calls DynamoDB's data operations, and MonitorTable's
name and keys are read by monitor/table.py alone, so no other module can touch the table around it."""

from __future__ import annotations

import ast

from tests.unit.test_import_graph import ROOT, SHARED

OWNERS = {
    "mcp_backend.jobs.store": "JobTable",
    "mcp_backend.monitor.table": "MonitorTable",
    "mcp_backend.request_rate": "RateLimitTable",  # the request counters
    "mcp_backend.call_slots": "RateLimitTable",  # the call slots
    "mcp_backend.elicitation_answers": "RateLimitTable",  # the answers to questions asked on a call's stream
    "mcp_backend.calllog.alert_windows": "AlertWindowTable",
    "mcp_backend.authorization.store": "AuthorizationTable",
}
MONITOR_OWNER = "mcp_backend.monitor.table"
# Modules that read MonitorTable's name only to know whether the function has the table, each with its reason.
MONITOR_PRESENCE_CHECKS = {
    # Whether the endpoints service exists, decided at start without loading the monitor package (its tools'
    # first call loads it): MonitorTable.is_configured's check, which nothing else reads the name for.
    "mcp_backend.tools.services",
}
DYNAMODB_OPERATIONS = {
    "get_item",
    "put_item",
    "update_item",
    "delete_item",
    "query",
    "scan",
    "batch_get_item",
    "batch_write_item",
    "transact_get_items",
    "transact_write_items",
    "execute_statement",
    "batch_execute_statement",
    "execute_transaction",
}
PAGINATED_OPERATIONS = {"query", "scan"}
# MonitorTable's keys and its index: what a direct read or write of the table would need.
MONITOR_KEY_NAMES = {
    "key",
    "endpoint_item",
    "ENDPOINT_SORT_KEY",
    "ENDPOINTS_BY_OWNER_INDEX",
    "REGISTERED_ENDPOINTS_INDEX",
    "REGISTRY_ATTRIBUTE",
    "REGISTRY_PARTITION",
}
SOURCES = {
    **SHARED.modules,
    **{f"functions.{path.parent.name}": path for path in (ROOT / "functions").glob("*/app.py")},
}


def trees() -> dict[str, ast.AST]:
    return {module: ast.parse(path.read_text()) for module, path in SOURCES.items()}


def calls_dynamodb(tree: ast.AST) -> bool:
    """A call of a DynamoDB operation, or of a query/scan paginator."""
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        if node.func.attr in DYNAMODB_OPERATIONS:
            return True
        arg = node.args[0] if node.args else None
        if node.func.attr == "get_paginator" and isinstance(arg, ast.Constant) and arg.value in PAGINATED_OPERATIONS:
            return True
    return False


def reads_monitor_table(tree: ast.AST) -> bool:
    """Reads the table-name setting, passes it by keyword, or imports the table's keys."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "monitor_table_name":
            return True
        if isinstance(node, ast.keyword) and node.arg == "monitor_table_name":
            return True
        if isinstance(node, ast.ImportFrom) and node.module == "mcp_backend.monitor.items":
            if MONITOR_KEY_NAMES & {alias.name for alias in node.names}:
                return True
    return False


def test_only_table_owners_call_dynamodb():
    # Given every module of the shared package and every function handler
    # When the ones that call a DynamoDB data operation are picked out
    callers = {module for module, tree in trees().items() if calls_dynamodb(tree)}

    # Then they are exactly the tables' owners, and the block-lease algorithm, which writes only the item an owner
    # names with the owner's client (the request rate writes through it alone)
    assert callers == {*OWNERS, "mcp_backend.block_leases"} - {"mcp_backend.request_rate"}


def test_only_monitor_tables_owner_reads_its_name_and_keys():
    # Given every module of the shared package and every function handler
    # When the ones that read MonitorTable's name setting or import its keys are picked out
    readers = {module for module, tree in trees().items() if reads_monitor_table(tree)}

    # Then only the owner does (config.py declares the setting, which is no read), and the presence checks
    assert readers == {MONITOR_OWNER, *MONITOR_PRESENCE_CHECKS}


def test_the_checks_see_a_direct_write():
    # Given a module that writes to MonitorTable around its owner
    tree = ast.parse(
        "from mcp_backend.monitor.items import ENDPOINT_SORT_KEY, key\n"
        "def forget(client, settings, server_id):\n"
        "    client.delete_item(TableName=settings.monitor_table_name, Key=key(server_id, ENDPOINT_SORT_KEY))\n"
    )

    # Then both checks would name it
    assert calls_dynamodb(tree)
    assert reads_monitor_table(tree)
