"""Adding a tool is one entry in the tool table: the MCP endpoint lists it, submits it as a job, the worker
runs it and get_job reads its result back."""

from __future__ import annotations

import anyio
import pytest
from pydantic import Field

from mcp_backend.tools.context import StrictInput, ToolContext, ToolOutput
from mcp_backend.tools.table import TOOLS, Access, Effect, Mode, Tool
from tests.e2e.conftest import mcp_client

pytestmark = pytest.mark.e2e


class CountWordsInput(StrictInput):
    text: str = Field(min_length=1, max_length=1000)


class CountWordsOutput(ToolOutput):
    words: int
    by: str


def count_words(request: CountWordsInput, ctx: ToolContext) -> dict:
    return {"words": len(request.text.split()), "by": ctx.user_id}


def test_a_throwaway_tool_added_by_one_entry_is_listed_submitted_run_by_the_worker_and_read_back(
    endpoint_factory, monkeypatch
):
    # Given one new entry in the tool table, runnable as a job
    tool = Tool(
        name="count_words",
        description="Count the words of a text.",
        input_model=CountWordsInput,
        run=count_words,
        access=Access.SUBMIT,
        services=frozenset(),
        effect=Effect.NONE,
        output_model=CountWordsOutput,
        mode=Mode.JOB,
    )
    monkeypatch.setitem(TOOLS, tool.name, tool)
    endpoint = endpoint_factory()

    # When a client lists the tools and submits one job of it
    async def submit():
        async with mcp_client(endpoint, "2026-07-28") as client:
            names = {t.name for t in (await client.list_tools()).tools}
            submitted = await client.call_tool("submit_count_words", {"text": "one two three"})
            return names, submitted

    names, submitted = anyio.run(submit)

    # Then its submit tools are listed (and no synchronous one), and the job is queued
    assert {"submit_count_words", "submit_count_words_batch"} <= names
    assert "count_words" not in names
    assert not submitted.is_error
    job_id = submitted.structured_content["jobId"]

    # When the worker drains the queue and the client reads the job back
    endpoint.local.sqs_source_for("ToolWorker").drain()

    async def fetch():
        async with mcp_client(endpoint, "2026-07-28") as client:
            return await client.call_tool("get_job", {"job_id": job_id})

    job = anyio.run(fetch).structured_content

    # Then the worker ran the new tool for the caller
    assert job["status"] == "SUCCEEDED"
    assert job["tool"] == "count_words"
    assert job["result"] == {"words": 3, "by": "apikey:user-alice"}  # the caller, namespaced by how it authenticated
