"""The deployed stack, end to end, through its public MCP endpoint: `make smoke URL=... KEY=...`.

Skipped unless MCP_SMOKE_URL and MCP_SMOKE_KEY name a deployed endpoint and an API key for it, so `make test`
and CI (which have neither) never send traffic anywhere.
"""

from __future__ import annotations

import asyncio
import os

import pytest

from tests.deployed.smoke import exercise, failures

URL = os.environ.get("MCP_SMOKE_URL", "")
KEY = os.environ.get("MCP_SMOKE_KEY", "")
DATASET = os.environ.get("MCP_SMOKE_DATASET", "")

pytestmark = pytest.mark.skipif(
    not (URL and KEY), reason="deployed-stack test: run `make smoke URL=<McpServerUrl> KEY=<API key>`"
)


def test_the_deployed_endpoint_lists_its_tools_and_runs_a_job_to_success():
    # Given a deployed stack's endpoint and an API key for it
    # When an MCP client lists the tools, submits one analysis and polls the job
    tools, job = asyncio.run(exercise(URL, KEY, DATASET))

    # Then the job tools are there and the job went through the queue and the worker to SUCCEEDED
    assert failures(tools, job) == []
