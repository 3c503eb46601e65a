"""The deployed stack, end to end, through its public MCP endpoint: `make smoke URL=... KEY=...`.

Skipped unless MCP_SMOKE_URL and MCP_SMOKE_KEY name a deployed endpoint and an API key for it, so `make test`
and CI (which have neither) never send traffic anywhere.
"""

from __future__ import annotations

import asyncio
import os
from datetime import UTC, datetime

import boto3
import pytest

from tests.deployed.smoke import exercise, failures
from tests.deployed.trace_check import missing_spans, new_sampled_traceparent

URL = os.environ.get("MCP_SMOKE_URL", "")
KEY = os.environ.get("MCP_SMOKE_KEY", "")
DATASET = os.environ.get("MCP_SMOKE_DATASET", "")
TRACE = os.environ.get("MCP_SMOKE_TRACE", "") not in ("", "0")

pytestmark = pytest.mark.skipif(
    not (URL and KEY), reason="deployed-stack test: run `make smoke URL=<McpServerUrl> KEY=<API key>`"
)


def test_the_deployed_endpoint_lists_its_tools_and_runs_a_job_to_success():
    # Given a deployed stack's endpoint and an API key for it
    # When an MCP client lists the tools, submits one analysis and polls the job
    tools, job = asyncio.run(exercise(URL, KEY, DATASET))

    # Then the job tools are there and the job went through the queue and the worker to SUCCEEDED
    assert failures(tools, job) == []


@pytest.mark.skipif(
    not TRACE, reason="the stack's spans in X-Ray: `make smoke ... TRACE=1` (a stack with Tracing=xray)"
)
def test_one_jobs_spans_reach_xray_as_one_trace():
    # Given a stack deployed with Tracing=xray, and a client span in a new sampled trace
    trace_id, traceparent = new_sampled_traceparent()
    started = datetime.now(UTC)

    # When the client lists the tools and runs one job to its end, every request carrying that trace
    tools, job = asyncio.run(exercise(URL, KEY, DATASET, traceparent))
    assert failures(tools, job) == []

    # Then X-Ray's trace holds the job from the request to the worker's tool run
    assert missing_spans(boto3.client("xray"), trace_id, started, now=lambda: datetime.now(UTC)) == []
