"""One-off upgrade of a MonitorTable whose endpoints were registered before the RegisteredEndpoints index: the
probe dispatcher reads only that index, so until an old endpoint item carries the index's key it is not probed.
Run once after deploying over such a stack (docs/operations.md#upgrading-a-deployed-stack); running it again does
nothing.

    python -m mcp_backend.monitor.upgrade --table <MonitorTable's name>
"""

from __future__ import annotations

import argparse
import sys

from mcp_backend.aws import new_client
from mcp_backend.monitor.table import MonitorTable


def index_old_endpoints(table: MonitorTable) -> int:
    """Index every endpoint stored before the index; returns how many were indexed (deleted ones are skipped)."""
    return sum(table.index_endpoint(server_id) for server_id in list(table.unindexed_endpoint_ids()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mcp_backend.monitor.upgrade")
    parser.add_argument("--table", required=True, help="the stack's MonitorTable name (its MonitorTableName output)")
    args = parser.parse_args(argv)
    indexed = index_old_endpoints(MonitorTable(args.table, new_client("dynamodb")))
    print(f"{indexed} endpoints indexed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
