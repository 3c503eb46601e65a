"""The baseline the endpoint is measured against: the official SDK's stateless Streamable HTTP app with
its defaults, serving one trivial tool. Started exactly as McpServer's run.sh starts ours:
`python -m uvicorn --factory tests.bench.stock_app:create_app`. `create_json_app` is the same app
answering with JSON instead of an event stream, to show what the stream costs per request."""

from __future__ import annotations

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
