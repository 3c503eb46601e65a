"""Resources, prompts, completion and icons through the SDK's own client, in both protocol eras, over the
in-process endpoint on the template's tables and result bucket (moto): the caller's jobs and results as
resources, read in pages; another caller's are "not found"; prompts validate their arguments."""

from __future__ import annotations

import datetime as dt
import json
from contextlib import AbstractAsyncContextManager
from typing import Any

import anyio
import boto3
import pytest
import time_machine
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, PromptReference, ResourceTemplateReference
from starlette.types import ASGIApp

from mcp_backend.api_keys import Principal
from mcp_backend.config import McpSettings, load_settings
from mcp_backend.jobs.models import JobError, JobMessage
from mcp_backend.jobs.results import ResultObjects, result_key, result_text
from mcp_backend.jobs.store import JobStore
from mcp_backend.mcp import resources
from mcp_backend.mcp.resources import RESOURCE_NOT_FOUND
from mcp_backend.mcp.server import create_app
from tests.unit.endpoint_fakes import EveryoneIs, ServedInProcess
from tests.unit.sdk_client import sdk_client

ERAS = ["legacy", "2026-07-28"]  # the initialize handshake (2025-11-25 negotiated) and the stateless era
PAGE_BYTES = 1024
ALICE, BOB = "user-alice", "user-bob"


class TokenIsTheUser(EveryoneIs):
    """The bearer token names the caller: one endpoint serves alice and bob."""

    def __init__(self) -> None:
        super().__init__(Principal(user_id=ALICE))

    async def authenticate(self, bearer_token: str, resource: str) -> Principal:
        return Principal(user_id=bearer_token)


@pytest.fixture
def stack(local) -> dict[str, Any]:
    """alice's jobs, a second apart, newest last: a small result, a large one (in the result bucket), a failed
    one and a pending one; bob's one job with a result."""
    environment = dict(local.stack.function("McpServer").environment)
    environment["JOB_RESULT_PAGE_BYTES"] = str(PAGE_BYTES)
    settings = load_settings(McpSettings, environment)
    store = JobStore(settings.job_table_name, boto3.client("dynamodb"))
    objects = ResultObjects(settings.job_result_bucket_name, boto3.client("s3"))
    start = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    large = {"columns": [{"name": f"column-{n}", "mean": n / 3} for n in range(200)]}
    jobs: dict[str, str] = {}

    def job(number: int, user: str, name: str) -> JobMessage:
        message = JobMessage(
            job_id=f"{name}-{number:04d}-{user[5:]}",
            user_id=user,
            tool="analyze_dataset",
            input={"dataset_url": "s3://local-datasets/x.csv"},
            submitted_at=start,
        )
        with time_machine.travel(start + dt.timedelta(seconds=number), tick=False):
            assert store.create_pending(message)
        jobs[f"{user}/{name}"] = message.job_id
        return message

    store.mark_succeeded(job(1, ALICE, "small"), result_text=result_text({"rows": 3}))
    big = job(2, ALICE, "large")
    objects.put(result_key(ALICE, big.job_id), result_text(large))
    store.mark_succeeded(big, result_key=result_key(ALICE, big.job_id))
    failed = job(3, ALICE, "failed")
    store.mark_failed(failed.job_id, ALICE, JobError(type="DatasetNotFound", message="no such key"), "m-1", "x")
    job(4, ALICE, "pending")
    store.mark_succeeded(job(5, BOB, "bobs"), result_text=result_text({"rows": 9}))
    return {"settings": settings, "jobs": jobs, "large": large}


@pytest.fixture
def app(stack) -> ASGIApp:
    return create_app(stack["settings"], TokenIsTheUser(), boto3.client)


def connected(app: ASGIApp, mode: str, user: str = ALICE) -> AbstractAsyncContextManager[Client]:
    return sdk_client(app, mode, user)


def run(scenario: Any) -> Any:
    return anyio.run(scenario)


@pytest.mark.parametrize("mode", ERAS)
def test_the_caller_lists_their_own_jobs_newest_first_in_pages(app, stack, mode):
    # Given alice's four jobs and bob's one
    async def scenario() -> list[Any]:
        async with connected(app, mode) as client:
            # When alice lists her resources
            listed = await client.list_resources()
            # And asks for a page with a cursor she made up
            with pytest.raises(MCPError) as refused:
                await client.list_resources(cursor="not-a-cursor", cache_mode="bypass")
            return [listed, refused.value]

    listed, refused = run(scenario)
    # Then she gets her jobs as job:// resources, newest first, with icons, and nothing of bob's
    jobs = stack["jobs"]
    assert [resource.uri for resource in listed.resources] == [
        f"job://{jobs[f'{ALICE}/{name}']}" for name in ("pending", "failed", "large", "small")
    ]
    assert all(
        resource.icons and resource.icons[0].src.startswith("data:image/svg+xml;base64,")
        for resource in listed.resources
    )
    assert listed.next_cursor is None
    # And a cursor the server did not issue is invalid params
    assert refused.error.code == INVALID_PARAMS


@pytest.mark.parametrize("mode", ERAS)
def test_a_listing_longer_than_a_page_continues_from_its_cursor(app, stack, mode, monkeypatch):
    # Given pages of three resources, and alice's four jobs
    monkeypatch.setattr(resources, "LIST_PAGE_SIZE", 3)

    async def scenario() -> list[Any]:
        async with connected(app, mode) as client:
            # When she lists them, then passes back the cursor
            first = await client.list_resources()
            return [first, await client.list_resources(cursor=first.next_cursor)]

    first, second = run(scenario)
    # Then the two pages hold her jobs once each, newest first, and the last page has no cursor
    jobs = stack["jobs"]
    assert [r.uri for r in first.resources + second.resources] == [
        f"job://{jobs[f'{ALICE}/{name}']}" for name in ("pending", "failed", "large", "small")
    ]
    assert (len(first.resources), first.next_cursor is not None, second.next_cursor) == (3, True, None)


@pytest.mark.parametrize("mode", ERAS)
def test_the_templates_name_a_job_its_result_and_their_views(app, mode):
    async def scenario() -> Any:
        async with connected(app, mode) as client:
            return await client.list_resource_templates()

    templates = run(scenario)
    assert {template.uri_template for template in templates.resource_templates} == {
        "job://{jobId}",
        "job://{jobId}/result{?page}",
        "ui://analysis/result.html",  # MCP Apps views (tests/functions/test_mcp_apps.py)
        "ui://jobs/{jobId}/result.html",
    }
    assert all(template.icons for template in templates.resource_templates)


@pytest.mark.parametrize("mode", ERAS)
def test_a_job_and_a_small_result_are_read_whole(app, stack, mode):
    small = stack["jobs"][f"{ALICE}/small"]

    async def scenario() -> tuple[Any, Any]:
        async with connected(app, mode) as client:
            return await client.read_resource(f"job://{small}"), await client.read_resource(f"job://{small}/result")

    job, result = run(scenario)
    state = json.loads(job.contents[0].text)
    assert (state["status"], state["resultUri"]) == ("SUCCEEDED", f"job://{small}/result")
    assert json.loads(result.contents[0].text) == {"rows": 3}
    assert result.contents[0].mime_type == "application/json"
    assert result.contents[0].meta == {"page": 0, "pages": 1, "totalBytes": len('{"rows":3}')}


@pytest.mark.parametrize("mode", ERAS)
def test_a_large_result_is_read_in_byte_pages_that_join_into_its_json(app, stack, mode):
    # Given alice's result of several pages, stored in the result bucket
    large = stack["jobs"][f"{ALICE}/large"]

    async def scenario() -> list[Any]:
        pages, uri = [], f"job://{large}/result"
        async with connected(app, mode) as client:
            # When she reads it, following nextUri
            while uri:
                read = await client.read_resource(uri)
                pages.append(read.contents[0])
                uri = (read.contents[0].meta or {}).get("nextUri")
        return pages

    pages = run(scenario)
    # Then each page is at most a page of bytes, and the pages join into the result's JSON
    total = len(result_text(stack["large"]))
    assert len(pages) == -(-total // PAGE_BYTES) > 1
    assert all(len(page.text) <= PAGE_BYTES and page.meta["totalBytes"] == total for page in pages)
    assert json.loads("".join(page.text for page in pages)) == stack["large"]


@pytest.mark.parametrize("mode", ERAS)
def test_another_callers_job_an_unknown_uri_and_a_page_too_far_are_all_not_found(app, stack, mode):
    # Given bob's job with a result, and alice asking
    bobs = stack["jobs"][f"{BOB}/bobs"]
    pending = stack["jobs"][f"{ALICE}/pending"]
    uris = [
        f"job://{bobs}",
        f"job://{bobs}/result",
        "job://00000000-0000-4000-8000-000000000000",
        f"job://{pending}/result",  # no result yet
        f"job://{stack['jobs'][f'{ALICE}/small']}/result?page=7",
        f"job://{stack['jobs'][f'{ALICE}/small']}/result?page=-1",
        f"job://{stack['jobs'][f'{ALICE}/small']}/result?page=abc",
        "job://not a job id!",
        "job://" + "a" * 50_000,
        "file:///etc/passwd",
    ]

    async def scenario() -> list[MCPError]:
        errors = []
        async with connected(app, mode) as client:
            for uri in uris:
                with pytest.raises(MCPError) as refused:
                    await client.read_resource(uri)
                errors.append(refused.value)
        return errors

    errors = run(scenario)
    # Then every one is the same "Resource not found", with the era's code, revealing nothing more
    code = RESOURCE_NOT_FOUND if mode == "legacy" else INVALID_PARAMS
    assert [(error.error.code, error.error.message) for error in errors] == [(code, "Resource not found")] * len(uris)
    assert [error.error.data for error in errors] == [{"uri": uri} for uri in uris]


@pytest.mark.parametrize("mode", ERAS)
def test_get_job_links_the_result_resource_instead_of_repeating_a_large_page(app, stack, mode):
    large = stack["jobs"][f"{ALICE}/large"]

    async def scenario() -> Any:
        async with connected(app, mode) as client:
            return await client.call_tool("get_job", {"job_id": large})

    answer = run(scenario)
    text, link = answer.content
    assert link.type == "resource_link" and link.uri == f"job://{large}/result"
    assert link.size == len(result_text(stack["large"]))
    assert answer.structured_content["resultChunk"] and "resultChunk" not in text.text


@pytest.mark.parametrize("mode", ERAS)
def test_prompts_are_listed_with_their_arguments_and_icons(app, mode):
    async def scenario() -> Any:
        async with connected(app, mode) as client:
            return await client.list_prompts()

    prompts = {prompt.name: prompt for prompt in run(scenario).prompts}
    assert set(prompts) == {"summarise_analysis", "investigate_failed_jobs"}
    assert [(a.name, a.required) for a in prompts["summarise_analysis"].arguments] == [("job_id", True)]
    assert [(a.name, a.required) for a in prompts["investigate_failed_jobs"].arguments] == [
        ("since", False),
        ("limit", False),
    ]
    assert all(prompt.icons for prompt in prompts.values())


@pytest.mark.parametrize("mode", ERAS)
def test_a_prompt_renders_the_callers_job_with_a_link_to_its_result(app, stack, mode):
    small = stack["jobs"][f"{ALICE}/small"]
    failed = stack["jobs"][f"{ALICE}/failed"]

    async def scenario() -> tuple[Any, Any]:
        async with connected(app, mode) as client:
            return (
                await client.get_prompt("summarise_analysis", {"job_id": small}),
                await client.get_prompt("investigate_failed_jobs", {"limit": "5"}),
            )

    summary, failures = run(scenario)
    assert small in summary.messages[0].content.text
    assert summary.messages[1].content.type == "resource_link"
    assert summary.messages[1].content.uri == f"job://{small}/result"
    assert failed in failures.messages[0].content.text and "DatasetNotFound" in failures.messages[0].content.text
    assert failures.messages[1].content.uri == f"job://{failed}"


@pytest.mark.parametrize("mode", ERAS)
def test_bad_prompt_arguments_are_invalid_params_naming_the_argument(app, stack, mode):
    bobs = stack["jobs"][f"{BOB}/bobs"]
    pending = stack["jobs"][f"{ALICE}/pending"]
    asks = [
        ("summarise_analysis", {}, "summarise_analysis: job_id: Field required"),
        ("summarise_analysis", {"job_id": "../../x"}, "summarise_analysis: job_id: String should match pattern"),
        ("summarise_analysis", {"job_id": bobs}, f"summarise_analysis: job_id: you have no job {bobs}"),
        ("summarise_analysis", {"job_id": pending}, f"summarise_analysis: job_id: job {pending} has no result"),
        ("investigate_failed_jobs", {"limit": "500"}, "investigate_failed_jobs: limit: Input should be less"),
        ("investigate_failed_jobs", {"since": "yesterday"}, "investigate_failed_jobs: since: Input should be"),
        ("investigate_failed_jobs", {"colour": "red"}, "investigate_failed_jobs: colour: Extra inputs"),
        ("no_such_prompt", {}, "Unknown prompt"),
    ]

    async def scenario() -> list[MCPError]:
        errors = []
        async with connected(app, mode) as client:
            for name, arguments, _ in asks:
                with pytest.raises(MCPError) as refused:
                    await client.get_prompt(name, arguments)
                errors.append(refused.value)
        return errors

    errors = run(scenario)
    for (_, _, message), error in zip(asks, errors, strict=True):
        assert error.error.code == INVALID_PARAMS
        assert error.error.message.startswith(message), error.error.message
    # And no message repeats the values it refused
    assert not any("yesterday" in e.error.message or "../../x" in e.error.message for e in errors)


@pytest.mark.parametrize("mode", ERAS)
def test_completion_offers_the_callers_finished_jobs_by_prefix(app, stack, mode):
    jobs = stack["jobs"]

    async def scenario() -> list[Any]:
        async with connected(app, mode) as client:
            prompt = PromptReference(name="summarise_analysis")
            template = ResourceTemplateReference(uri="job://{jobId}")
            return [
                await client.complete(prompt, {"name": "job_id", "value": ""}),
                await client.complete(prompt, {"name": "job_id", "value": "lar"}),
                await client.complete(template, {"name": "jobId", "value": "pend"}),
                await client.complete(prompt, {"name": "job_id", "value": "bobs"}),
            ]

    every, large, pending, bobs = run(scenario)
    # Then the prompt's job_id offers alice's succeeded jobs, newest first; the template's jobId any of hers
    assert every.completion.values == [jobs[f"{ALICE}/large"], jobs[f"{ALICE}/small"]]
    assert large.completion.values == [jobs[f"{ALICE}/large"]]
    assert pending.completion.values == [jobs[f"{ALICE}/pending"]]
    # And never bob's
    assert bobs.completion.values == []


# "auto" discovers the server (server/discover, 2026-07-28): a client that adopts the version skips it.
@pytest.mark.parametrize(("mode", "version"), [("legacy", "2025-11-25"), ("auto", "2026-07-28")])
def test_the_server_and_its_tools_carry_icons(app, mode, version):
    async def scenario() -> tuple[Any, Any, Any]:
        async with connected(app, mode) as client:
            return client.protocol_version, client.server_info, await client.list_tools()

    negotiated, info, tools = run(scenario)
    assert negotiated == version
    assert info.icons and info.icons[0].mime_type == "image/svg+xml" and info.icons[0].sizes == ["any"]
    assert all(tool.icons for tool in tools.tools)


def raw_requests(app: ASGIApp, version: str, bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Stateless 2025-era POSTs with `version` in the protocol header, as a client of that version sends them."""
    headers = {
        "authorization": f"Bearer {ALICE}",
        "accept": "application/json, text/event-stream",
        "content-type": "application/json",
        "mcp-protocol-version": version,
    }

    async def scenario() -> list[dict[str, Any]]:
        async with ServedInProcess(app) as http:
            answers = []
            for body in bodies:
                response = await http.post("/mcp", json=body, headers=headers)
                assert response.status_code == 200
                answers.append(response.json())
            return answers

    return run(scenario)


@pytest.mark.parametrize(("version", "links"), [("2025-03-26", False), ("2025-06-18", True)])
def test_a_client_older_than_resource_links_gets_the_uri_as_text(app, stack, version, links):
    # Given a client of a protocol version with or without resource_link content
    small = stack["jobs"][f"{ALICE}/small"]
    bodies = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "get_job", "arguments": {"job_id": small}},
        },
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "prompts/get",
            "params": {"name": "summarise_analysis", "arguments": {"job_id": small}},
        },
    ]
    # When it reads a job with a result and gets a prompt that links it
    job, prompt = raw_requests(app, version, bodies)
    # Then only a client that knows resource links gets them; an older one gets the URI in text
    kinds = [block["type"] for block in job["result"]["content"]]
    assert kinds == (["text", "resource_link"] if links else ["text"])
    last = prompt["result"]["messages"][-1]["content"]
    assert (last["type"], last.get("uri") or last["text"].rpartition(" ")[2]) == (
        "resource_link" if links else "text",
        f"job://{small}/result",
    )
