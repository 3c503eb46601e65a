"""The MCP endpoint end to end: the SDK's client in both protocol eras, the job pipeline through the real
worker, and the tools' contracts (idempotency, ownership, pagination, the DLQ peek)."""

from __future__ import annotations

import datetime as dt
import json

import anyio
import boto3
import pytest
import time_machine

from mcp_backend.jobs.store import JobStore
from tests.e2e.conftest import mcp_client

ERAS = ["legacy", "2026-07-28"]  # initialize handshake (2025-03-26 ... 2025-11-25) and the stateless era
SALES = "s3://local-datasets/apikey%3Auser-alice/sales.csv"
TOOL_NAMES = {
    "submit_analysis",
    "submit_analyses",
    "get_job",
    "list_failed_jobs",
    "cancel_job",
    "analyze_dataset",
    "register_endpoint",
    "unregister_endpoint",
    "list_endpoints",
    "endpoint_status",
}


def run(coroutine_function, *args):
    return anyio.run(coroutine_function, *args)


def call_error(endpoint, tool: str, arguments: dict) -> str | None:
    """The text of the tool execution error a 2026-07-28 tools/call answers with (invalid arguments are one in
    that era), or None when it succeeds."""

    async def call():
        async with mcp_client(endpoint, "2026-07-28") as client:
            result = await client.call_tool(tool, arguments)
        return result.content[0].text if result.is_error else None

    return run(call)


@pytest.mark.parametrize("mode", ERAS)
def test_a_submitted_job_completes_through_the_worker_and_get_job_returns_its_result(endpoint, mode):
    # Given the SDK client connected in one protocol era
    async def submit():
        async with mcp_client(endpoint, mode) as client:
            tools = await client.list_tools()
            submitted = await client.call_tool("submit_analysis", {"dataset_url": SALES})
            return client.protocol_version, {t.name for t in tools.tools}, submitted

    # When it lists the tools and submits an analysis
    version, names, submitted = run(submit)

    # Then it negotiated that era, sees every tool, and one PENDING job is queued
    assert version == ("2025-11-25" if mode == "legacy" else mode)
    assert names == TOOL_NAMES
    assert not submitted.is_error
    job_id = submitted.structured_content["jobId"]
    assert submitted.structured_content["status"] == "PENDING"
    assert endpoint.local.queue_depth("JobQueue") == 1

    # When the worker drains the queue and the client asks for the job
    endpoint.local.sqs_source_for("ToolWorker").drain()

    async def fetch():
        async with mcp_client(endpoint, mode) as client:
            return await client.call_tool("get_job", {"job_id": job_id})

    job = run(fetch).structured_content

    # Then the job succeeded with the analysis result, recorded under the caller's user id
    assert job["status"] == "SUCCEEDED"
    assert job["result"]["rowCount"] == 6
    assert endpoint.local.queue_depth("JobQueue") == 0


@pytest.mark.parametrize("mode", ERAS)
def test_analyze_dataset_streams_progress_notifications_before_its_result(endpoint, mode):
    # Given a client that records progress notifications as they arrive
    progress: list[tuple[float, str | None]] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, message))

    async def analyze():
        async with mcp_client(endpoint, mode) as client:
            result = await client.call_tool("analyze_dataset", {"dataset_url": SALES}, progress_callback=on_progress)
            return list(progress), result

    # When it runs the synchronous analysis
    seen_before_result, result = run(analyze)

    # Then progress started at 0 and finished at 1 before the result came back
    assert not result.is_error
    assert result.structured_content["rowCount"] == 6
    assert seen_before_result[0] == (0.0, "started")
    assert seen_before_result[-1] == (1.0, "done")


def test_the_same_call_id_returns_the_same_job_and_it_runs_once(endpoint):
    # Given a client that retries a submission with its callId
    async def submit_twice():
        async with mcp_client(endpoint, "2026-07-28") as client:
            arguments = {"dataset_url": SALES, "callId": "retry-42"}
            first = await client.call_tool("submit_analysis", arguments)
            second = await client.call_tool("submit_analysis", arguments)
            return first.structured_content, second.structured_content

    # When it submits the same call twice
    first, second = run(submit_twice)

    # Then both answers name one job; the repeat of the still PENDING job sent its message again
    assert first["jobId"] == second["jobId"]
    assert second.get("repeated") is True
    assert endpoint.local.queue_depth("JobQueue") == 2

    # And when the worker drains the queue, the job ran once
    endpoint.local.sqs_source_for("ToolWorker").drain()
    job = JobStore(endpoint.local.table_name("JobTable")).get(first["jobId"])
    assert (job["status"], job["runs"]) == ("SUCCEEDED", 1)


def test_submit_analyses_enqueues_in_batches_and_reports_each_item(endpoint):
    # Given 12 valid items (two SendMessageBatch calls), one repeating another's callId
    items = [{"dataset_url": SALES, "callId": f"bulk-{i}"} for i in range(11)] + [
        {"dataset_url": SALES, "callId": "bulk-0"}
    ]

    async def submit():
        async with mcp_client(endpoint, "legacy") as client:
            return (await client.call_tool("submit_analyses", {"items": items})).structured_content

    # When they are submitted at once
    results = run(submit)["results"]

    # Then each item has a job id, the repeat names the first item's job, and 11 messages were sent
    assert [r["index"] for r in results] == list(range(12))
    assert results[11]["jobId"] == results[0]["jobId"]
    assert len({r["jobId"] for r in results}) == 11
    assert endpoint.local.queue_depth("JobQueue") == 11


def test_an_invalid_item_is_that_items_error_and_the_valid_items_are_queued(endpoint):
    # Given ten items of which the fourth has an ftp:// URL and the eighth an unknown field
    items = [{"dataset_url": SALES, "callId": f"mixed-{i}"} for i in range(10)]
    items[3]["dataset_url"] = "ftp://example.com/data.csv"
    items[7]["colour"] = "red"

    async def submit():
        async with mcp_client(endpoint, "2026-07-28") as client:
            return await client.call_tool("submit_analyses", {"items": items})

    # When they are submitted at once
    result = run(submit)

    # Then the call succeeds with one entry per item, in order: the two invalid ones are errors naming the
    # field (never its value), the eight valid ones are jobs, and eight messages were sent
    assert not result.is_error
    results = result.structured_content["results"]
    assert [r["index"] for r in results] == list(range(10))
    assert [i for i, r in enumerate(results) if "error" in r] == [3, 7]
    assert results[3]["error"]["type"] == "InvalidToolInput" and "dataset_url" in results[3]["error"]["message"]
    assert "colour" in results[7]["error"]["message"]
    assert "ftp://" not in json.dumps(results) and "red" not in json.dumps(results)
    assert len({r["jobId"] for r in results if "jobId" in r}) == 8
    assert endpoint.local.queue_depth("JobQueue") == 8


@pytest.mark.parametrize(
    ("arguments", "names"),
    [
        ({"items": "not-a-list"}, ["items"]),
        ({"items": [{"dataset_url": SALES}] * 101}, ["items"]),
        ({"items": []}, ["items"]),
        ({"items": [{"dataset_url": SALES}], "extra": 1}, ["extra"]),
    ],
)
def test_a_batch_envelope_problem_fails_the_whole_call_and_queues_nothing(endpoint, arguments, names):
    # Given a batch call whose envelope is wrong (not a list, more than 100 items, none, an unknown field)
    # When it is made
    error = call_error(endpoint, "submit_analyses", arguments)

    # Then it is a tool execution error naming the field, and nothing is queued
    assert error is not None
    assert all(name in error for name in names)
    assert endpoint.local.queue_depth("JobQueue") == 0


def test_the_batch_tool_publishes_its_items_schema(endpoint):
    # Given a client, When it lists the tools
    async def schema():
        async with mcp_client(endpoint, "2026-07-28") as client:
            tools = (await client.list_tools()).tools
            return next(tool.input_schema for tool in tools if tool.name == "submit_analyses")

    published = run(schema)

    # Then submit_analyses describes each item as a submit_analysis call (strict), at most 100 of them
    items = published["properties"]["items"]
    assert items["maxItems"] == 100
    item = published["$defs"][items["items"]["$ref"].rsplit("/", 1)[-1]]
    assert item["additionalProperties"] is False and "dataset_url" in item["properties"]


def test_another_users_job_is_not_found(endpoint):
    # Given alice's job
    async def scenario():
        async with mcp_client(endpoint, "2026-07-28") as alice:
            job_id = (await alice.call_tool("submit_analysis", {"dataset_url": SALES})).structured_content["jobId"]
        async with mcp_client(endpoint, "2026-07-28", key=endpoint.bob_key) as bob:
            # When bob asks for it
            return await bob.call_tool("get_job", {"job_id": job_id})

    result = run(scenario)

    # Then it does not exist for him
    assert result.is_error
    assert "JobNotFound" in result.content[0].text


def test_a_large_result_comes_in_pages_that_reassemble_to_it(endpoint_factory):
    # Given an endpoint whose result page is 64 bytes, and a completed job
    endpoint = endpoint_factory(JOB_RESULT_PAGE_BYTES="64")

    async def submit():
        async with mcp_client(endpoint, "legacy") as client:
            return (await client.call_tool("submit_analysis", {"dataset_url": SALES})).structured_content["jobId"]

    job_id = run(submit)
    endpoint.local.sqs_source_for("ToolWorker").drain()

    # When the client follows nextCursor to the end
    async def read_all():
        pages = []
        async with mcp_client(endpoint, "legacy") as client:
            arguments = {"job_id": job_id}
            while True:
                page = (await client.call_tool("get_job", arguments)).structured_content
                pages.append(page)
                if "nextCursor" not in page:
                    return pages
                arguments = {"job_id": job_id, "cursor": page["nextCursor"]}

    pages = run(read_all)

    # Then every page is small, and the chunks join to the whole result
    assert len(pages) > 2
    assert all(len(page["resultChunk"]) <= 64 for page in pages)
    result = json.loads("".join(page["resultChunk"] for page in pages))
    assert result["rowCount"] == 6
    assert len("".join(page["resultChunk"] for page in pages)) == pages[0]["resultChars"]


def test_a_forged_cursor_is_a_clear_tool_error(endpoint):
    async def forged():
        async with mcp_client(endpoint, "legacy") as client:
            job_id = (await client.call_tool("submit_analysis", {"dataset_url": SALES})).structured_content["jobId"]
            return await client.call_tool("get_job", {"job_id": job_id, "cursor": "bm90LWEtY3Vyc29y"})

    result = run(forged)

    assert result.is_error
    assert "InvalidCursor" in result.content[0].text


def test_list_failed_jobs_peeks_the_dlq_without_consuming_and_shows_the_recorded_error(endpoint):
    # Given alice's job whose dataset does not exist, retried by the worker until SQS moved it to the DLQ
    local = endpoint.local

    async def submit():
        async with mcp_client(endpoint, "2026-07-28") as client:
            arguments = {"dataset_url": "s3://local-datasets/apikey%3Auser-alice/missing.csv"}
            return (await client.call_tool("submit_analysis", arguments)).structured_content["jobId"]

    job_id = run(submit)
    sqs = boto3.client("sqs")
    attributes = sqs.get_queue_attributes(QueueUrl=local.queue_url("JobQueue"), AttributeNames=["All"])["Attributes"]
    visibility = int(attributes["VisibilityTimeout"])
    max_receives = json.loads(attributes["RedrivePolicy"])["maxReceiveCount"]
    start = dt.datetime.now(dt.UTC)
    for receive in range(max_receives + 1):
        with time_machine.travel(start + dt.timedelta(seconds=receive * (visibility + 1)), tick=False):
            local.sqs_source_for("ToolWorker").poll_once()
    assert local.queue_depth("JobDeadLetterQueue") == 1

    # When alice lists her failed jobs twice, and bob lists his
    async def listings():
        async with mcp_client(endpoint, "2026-07-28") as alice:
            first = (await alice.call_tool("list_failed_jobs", {"limit": 5})).structured_content
            second = (await alice.call_tool("list_failed_jobs", {})).structured_content
        async with mcp_client(endpoint, "legacy", key=endpoint.bob_key) as bob:
            other = (await bob.call_tool("list_failed_jobs", {})).structured_content
        return first, second, other

    # (at the clock of the last poll: moto stamps the moved message with it)
    with time_machine.travel(start + dt.timedelta(seconds=(max_receives + 1) * (visibility + 1)), tick=True):
        first, second, other = run(listings)

    # Then alice sees her job with the worker's error both times, bob sees nothing, and the DLQ keeps it
    assert [job["jobId"] for job in first["failedJobs"]] == [job_id]
    assert first["failedJobs"][0]["error"]["type"] == "DatasetUnreachable"
    assert first["failedJobs"] == second["failedJobs"]
    assert other["failedJobs"] == []
    assert local.queue_depth("JobDeadLetterQueue") == 1


@pytest.mark.parametrize(
    ("arguments", "names"),
    [
        ({"dataset_url": SALES, "unexpected": 1}, ["unexpected"]),
        ({"dataset_url": "ftp://example.com/data.csv"}, ["dataset_url"]),
        ({"dataset_url": SALES, "options": {"max_rows": 0}}, ["options.max_rows"]),
        ({}, ["dataset_url"]),
    ],
)
def test_invalid_tool_arguments_are_a_tool_error_naming_the_fields_and_nothing_is_queued(endpoint, arguments, names):
    # Given a client, When it calls submit_analysis with invalid arguments
    error = call_error(endpoint, "submit_analysis", arguments)

    # Then the call is a tool execution error naming the fields (never echoing values), and nothing is queued
    assert error is not None
    assert all(name in error for name in names)
    assert "ftp://" not in error
    assert endpoint.local.queue_depth("JobQueue") == 0
