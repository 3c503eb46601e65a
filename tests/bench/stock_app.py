"""The baselines the endpoint is measured against: the official SDK's stateless Streamable HTTP app with
its defaults, serving one trivial tool. Started exactly as McpServer's run.sh starts ours:
`python -m uvicorn --factory tests.bench.stock_app:create_app`. `create_json_app` is the same app
answering with JSON instead of an event stream. `create_getitem_app` answers JSON and its one tool,
`get_job`, makes the single DynamoDB GetItem ours makes for an unknown job: the honest baseline for
ours' `get_job` (auth, guard, telemetry and the call log are what ours adds)."""

from __future__ import annotations

import os
from typing import Any

from mcp.server.mcpserver import MCPServer
from starlette.applications import Starlette


def create_app() -> Starlette:
    return _server().streamable_http_app(stateless_http=True)


def create_json_app() -> Starlette:
    return _server().streamable_http_app(stateless_http=True, json_response=True)


def _server() -> MCPServer:
    server = MCPServer("bench-stock")

    @server.tool()
    def echo(text: str) -> str:
        """Return the text unchanged."""
        return text

    return server


def create_getitem_app() -> Starlette:
    # Imported here: the cold-start baseline (create_app) is the SDK's app alone, as ours loads no AWS SDK either.
    import boto3

    server = MCPServer("bench-stock-getitem")
    table = os.environ["JOB_TABLE_NAME"]
    dynamodb = boto3.client("dynamodb")

    @server.tool()
    def get_job(job_id: str) -> dict[str, Any]:
        """The job's item, or not found."""
        item = dynamodb.get_item(TableName=table, Key={"jobId": {"S": job_id}}).get("Item")
        return {"found": item is not None}

    return server.streamable_http_app(stateless_http=True, json_response=True)
