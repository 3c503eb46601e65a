"""The deployed-stack check itself, with nothing but the MCP SDK: tools/list, one job to SUCCEEDED.

`make smoke` runs it under pytest (tests/deployed/test_deployed_stack.py); `make smoke-deployed` runs it directly
(key_session.py) in the environment tests/deployed/requirements.txt pins by hash: what a deployed function has
(both layers and the runtime's boto3), no pytest and no plugins, since it holds the deploy role's credentials."""

from __future__ import annotations

import asyncio
import time
import uuid

JOB_DEADLINE_SECONDS = 300  # a bound on waiting, not a latency expectation
TERMINAL = {"SUCCEEDED", "FAILED"}


def endpoint(url: str) -> str:
    """The McpServerUrl output is the Function URL; the MCP endpoint is its /mcp."""
    return url if url.rstrip("/").endswith("/mcp") else url.rstrip("/") + "/mcp"


def dataset(url: str, chosen: str = "") -> str:
    """By default the endpoint's own health check (a one-line CSV over public https): no bucket needed."""
    return chosen or url.rstrip("/").removesuffix("/mcp") + "/healthz"


async def exercise(url: str, key: str, chosen_dataset: str = "", traceparent: str = "") -> tuple[set[str], dict]:
    """tools/list, then one job submitted and polled to its end; every request carries `traceparent` when given
    (the client's span: one trace holds the whole exchange)."""
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    headers = {"authorization": f"Bearer {key}", **({"traceparent": traceparent} if traceparent else {})}
    async with create_mcp_http_client(headers=headers) as http:
        async with Client(streamable_http_client(endpoint(url), http_client=http)) as client:
            tools = {tool.name for tool in (await client.list_tools()).tools}
            arguments = {"dataset_url": dataset(url, chosen_dataset), "callId": f"smoke-{uuid.uuid4()}"}
            job_id = (await client.call_tool("submit_analysis", arguments)).structured_content["jobId"]
            deadline = time.monotonic() + JOB_DEADLINE_SECONDS
            while True:
                job = (await client.call_tool("get_job", {"job_id": job_id})).structured_content
                if job["status"] in TERMINAL or time.monotonic() > deadline:
                    return tools, job
                await asyncio.sleep(2)


def failures(tools: set[str], job: dict) -> list[str]:
    """What the deployed stack got wrong: the job tools missing, or the job not SUCCEEDED."""
    found = [f"tool {name} missing" for name in sorted({"submit_analysis", "get_job"} - tools)]
    if job.get("status") != "SUCCEEDED":
        found.append(f"job {job.get('jobId', '?')} ended {job.get('status')}: {job.get('error', '')}")
    return found
