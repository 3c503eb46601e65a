"""Run in a fresh interpreter by test_mcp_server_cold_import: the endpoint built in-process (fake AWS clients, every
token alice's) answers the first requests of three protocol versions (initialize or server/discover, tools/list, a
tools/call of get_job), in both protocol eras; printed as JSON:
each answer's status and the MCP SDK modules the process loaded, and then whether the names the SDK's packages
re-export still resolve."""

from __future__ import annotations

import json
import sys
from typing import Any

import anyio

import mcp_backend.mcp.server as server  # before anything else that loads the SDK, as uvicorn imports it
from tests.unit.endpoint_fakes import SETTINGS, EveryoneIsAlice, ServedInProcess

HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
VERSIONS = ("2025-06-18", "2025-11-25", "2026-07-28")
STATELESS_ERA = "2026-07-28"  # no initialize: server/discover, and every request names its version in _meta


class FakeAws:
    """DynamoDB that has no job and admits every rate-limit write; Kinesis that takes every record."""

    def get_item(self, **request: Any) -> dict[str, Any]:
        return {}

    def update_item(self, **request: Any) -> dict[str, Any]:
        return {}

    def put_records(self, StreamName: str, Records: list[dict[str, Any]]) -> dict[str, Any]:
        return {"FailedRecordCount": 0, "Records": [{"SequenceNumber": "1", "ShardId": "s"} for _ in Records]}


def requests(version: str) -> list[dict[str, Any]]:
    call = {"name": "get_job", "arguments": {"job_id": "0" * 32}}
    if version == STATELESS_ERA:
        meta = {"io.modelcontextprotocol/protocolVersion": version, "io.modelcontextprotocol/clientCapabilities": {}}
        return [
            {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": meta}},
            {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"_meta": meta}},
            {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {**call, "_meta": meta}},
        ]
    initialize = {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "probe", "version": "1"}}
    return [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": initialize},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": call},
    ]


async def first_requests() -> list[int]:
    app = server.create_app(SETTINGS, authenticator=EveryoneIsAlice(), client_factory=lambda service: FakeAws())
    statuses: list[int] = []
    async with ServedInProcess(app) as client:
        for version in VERSIONS:
            for body in requests(version):
                headers = {**HEADERS, "authorization": "Bearer key", "mcp-protocol-version": version}
                headers["mcp-method"] = body["method"]
                if body["method"] == "tools/call":
                    headers["mcp-name"] = body["params"]["name"]
                response = await client.post("/mcp", json=body, headers=headers)
                statuses.append(response.status_code)
                assert "result" in response.text, response.text
    return statuses


def main() -> int:
    statuses = anyio.run(first_requests)
    loaded = sorted(name for name in sys.modules if name == "mcp" or name.startswith("mcp."))
    sdk, sdk_server = sys.modules["mcp"], sys.modules["mcp.server"]
    resolved = sdk_server.MCPServer.__name__ == "MCPServer" and sdk.Client.__name__ == "Client"
    print(json.dumps({"statuses": statuses, "sdk_modules": loaded, "re_exports_resolve": resolved}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
