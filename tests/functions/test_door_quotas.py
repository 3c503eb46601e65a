"""Every door the door table gives a tier quota (the job submit tools) refuses a caller whose quota is spent with a
tool error naming the limit and the tier, through the endpoint on the local stack's tables (moto); nothing else
creates work."""

from __future__ import annotations

import json
from typing import Any

import anyio
import boto3
import pytest

from mcp_backend.api_keys import Principal
from mcp_backend.config import McpSettings, load_settings
from mcp_backend.doors import METHODS, TOOL_DOORS
from mcp_backend.mcp.server import create_app
from tests.unit.endpoint_fakes import EveryoneIs, ServedInProcess

HEADERS = {
    "accept": "application/json, text/event-stream",
    "content-type": "application/json",
    "authorization": "Bearer carols-key",
    "mcp-protocol-version": "2025-11-25",
}
DATASET = {"dataset_url": "https://example.com/a.csv"}
# What one call of each quota door submits: one job.
ARGUMENTS = {"submit_analysis": DATASET, "submit_analyses": {"items": [DATASET]}}
QUOTA_DOORS = sorted(name for name, controls in TOOL_DOORS.items() if controls.quota)


def test_only_the_submit_tools_take_a_tier_quota():
    # Given the door table
    # Then the doors that create work carry the job quota, and no method does
    assert QUOTA_DOORS == sorted(ARGUMENTS)
    assert not any(controls.quota for controls in METHODS.values())


@pytest.mark.parametrize("door", QUOTA_DOORS)
def test_every_quota_door_refuses_a_caller_whose_daily_jobs_are_spent(local, door):
    # Given the endpoint with the free tier allowing one job a day, and carol (free tier)
    environment = {**local.stack.function("McpServer").environment, "LIMIT_FREE_DAILY_JOBS": "1"}
    settings = load_settings(McpSettings, environment)
    app = create_app(settings, authenticator=EveryoneIs(Principal(user_id="user-carol")), client_factory=boto3.client)

    # When she submits through the door twice
    async def calls() -> list[dict[str, Any]]:
        async with ServedInProcess(app) as client:
            answers = []
            for call in range(2):
                params = {"name": door, "arguments": ARGUMENTS[door]}
                body = {"jsonrpc": "2.0", "id": call, "method": "tools/call", "params": params}
                answers.append((await client.post("/mcp", json=body, headers=HEADERS)).json())
            return answers

    first, second = anyio.run(calls)

    # Then the first is queued and the second refused, naming the limit and the tier (a tool error or the item's)
    assert "daily_jobs" not in json.dumps(first)
    refusal = json.dumps(second["result"])
    assert "daily_jobs" in refusal and "tier free" in refusal
