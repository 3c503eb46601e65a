"""The deployed stack, end to end, through its public MCP endpoint: `make smoke URL=... KEY=...`.

Skipped unless MCP_SMOKE_URL and MCP_SMOKE_KEY name a deployed endpoint and an API key for it, so `make test`
and CI (which have neither) never send traffic anywhere.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid

import pytest

URL = os.environ.get("MCP_SMOKE_URL", "")
KEY = os.environ.get("MCP_SMOKE_KEY", "")
DATASET = os.environ.get("MCP_SMOKE_DATASET", "")
JOB_DEADLINE_SECONDS = 300  # a bound on waiting, not a latency expectation
TERMINAL = {"SUCCEEDED", "FAILED"}

pytestmark = pytest.mark.skipif(
    not (URL and KEY), reason="deployed-stack test: run `make smoke URL=<McpServerUrl> KEY=<API key>`"
)


def endpoint(url: str) -> str:
    """The McpServerUrl output is the Function URL; the MCP endpoint is its /mcp."""
    return url if url.rstrip("/").endswith("/mcp") else url.rstrip("/") + "/mcp"


def dataset(url: str) -> str:
    """By default the endpoint's own health check (a one-line CSV over public https): no bucket needed."""
    return DATASET or url.rstrip("/").removesuffix("/mcp") + "/healthz"


async def exercise(url: str, key: str) -> tuple[set[str], dict]:
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    async with create_mcp_http_client(headers={"authorization": f"Bearer {key}"}) as http:
        async with Client(streamable_http_client(endpoint(url), http_client=http)) as client:
            tools = {tool.name for tool in (await client.list_tools()).tools}
            arguments = {"dataset_url": dataset(url), "callId": f"smoke-{uuid.uuid4()}"}
            job_id = (await client.call_tool("submit_analysis", arguments)).structured_content["jobId"]
            deadline = time.monotonic() + JOB_DEADLINE_SECONDS
            while True:
                job = (await client.call_tool("get_job", {"job_id": job_id})).structured_content
                if job["status"] in TERMINAL or time.monotonic() > deadline:
                    return tools, job
                await asyncio.sleep(2)


def test_the_deployed_endpoint_lists_its_tools_and_runs_a_job_to_success():
    # Given a deployed stack's endpoint and an API key for it
    # When an MCP client lists the tools, submits one analysis and polls the job
    tools, job = asyncio.run(exercise(URL, KEY))

    # Then the job tools are there and the job went through the queue and the worker to SUCCEEDED
    assert {"submit_analysis", "get_job"} <= tools
    assert job["status"] == "SUCCEEDED", job
