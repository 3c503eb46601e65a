"""MCP Apps (`io.modelcontextprotocol/ui`): the analysis tool names its `ui://` view, and the caller's jobs are
served as `ui://` HTML pages, through the SDK's own client in both protocol eras, over the in-process endpoint on
the template's tables (moto). Every job value in a page is escaped."""

from __future__ import annotations

import html
from contextlib import AbstractAsyncContextManager
from typing import Any

import anyio
import boto3
import pytest
from mcp import Client
from mcp.server.apps import APP_MIME_TYPE, EXTENSION_ID
from mcp.shared.exceptions import MCPError
from starlette.types import ASGIApp

from mcp_backend.api_keys import Principal
from mcp_backend.config import McpSettings, load_settings
from mcp_backend.jobs.models import JobError, JobMessage
from mcp_backend.jobs.results import result_text
from mcp_backend.jobs.store import JobStore
from mcp_backend.mcp.server import create_app
from tests.unit.endpoint_fakes import EveryoneIs
from tests.unit.sdk_client import sdk_client

ERAS = ["legacy", "2026-07-28"]
ALICE = "user-alice"
HOSTILE = '</pre><script>alert("x")</script><img src=x onerror=alert(1)>&amp;'


@pytest.fixture
def stack(local) -> dict[str, Any]:
    """alice's finished job whose result and whose failed sibling's error carry markup."""
    settings = load_settings(McpSettings, dict(local.stack.function("McpServer").environment))
    store = JobStore(settings.job_table_name, boto3.client("dynamodb"))

    def job(job_id: str) -> JobMessage:
        message = JobMessage(
            job_id=job_id, user_id=ALICE, tool="analyze_dataset", input={"dataset_url": "s3://local-datasets/x.csv"}
        )
        assert store.create_pending(message)
        return message

    store.mark_succeeded(job("hostile-result-0001"), result_text=result_text({"note": HOSTILE, "rows": 3}))
    failed = job("hostile-error-0002")
    store.mark_failed(failed.job_id, ALICE, JobError(type="DatasetNotFound", message=HOSTILE), "m-1", "x")
    return {"settings": settings}


@pytest.fixture
def app(stack) -> ASGIApp:
    return create_app(stack["settings"], EveryoneIs(Principal(user_id=ALICE)), boto3.client)


def connected(app: ASGIApp, mode: str) -> AbstractAsyncContextManager[Client]:
    return sdk_client(app, mode)


def test_the_endpoint_advertises_mcp_apps_in_its_capabilities(app):
    # Given the endpoint
    async def scenario() -> Any:
        # When a host that has not connected before negotiates (server/discover, protocol 2026-07-28) and reads
        # the server's capabilities
        async with connected(app, "auto") as client:
            assert client.protocol_version == "2026-07-28"
            return client.server_capabilities

    capabilities = anyio.run(scenario)

    # Then MCP Apps is among its extensions under the SDK's identifier, with no settings: a host that renders
    # views knows the ui:// resources are for it. (The 2025-11-25 schema has no `extensions`: hosts of that era
    # find a view by the tool's `_meta.ui.resourceUri`.)
    assert capabilities.extensions is not None
    assert capabilities.extensions[EXTENSION_ID] == {}


@pytest.mark.parametrize("mode", ERAS)
def test_the_analysis_tool_names_its_view_and_the_view_is_an_mcp_app(app, mode):
    # Given the endpoint
    async def scenario() -> list[Any]:
        async with connected(app, mode) as client:
            # When a host lists the tools and reads the view analyze_dataset names
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
            uri = tools["analyze_dataset"].meta["ui"]["resourceUri"]
            return [tools, uri, await client.read_resource(uri)]

    tools, uri, read = anyio.run(scenario)

    # Then it is a ui:// resource served as the MCP Apps MIME type, declaring no outside origin
    assert uri == "ui://analysis/result.html"
    assert tools["get_job"].meta is None or "ui" not in tools["get_job"].meta
    [contents] = read.contents
    assert contents.mime_type == APP_MIME_TYPE == "text/html;profile=mcp-app"
    assert contents.meta["ui"]["csp"] == {"connectDomains": [], "resourceDomains": []}
    # And it shows the result the host sends as text, never as markup
    assert "ui/notifications/tool-result" in contents.text and ".textContent =" in contents.text
    assert "innerHTML" not in contents.text


@pytest.mark.parametrize("mode", ERAS)
def test_a_job_page_escapes_every_job_value(app, mode):
    # Given alice's jobs whose result and error carry markup
    async def scenario() -> list[Any]:
        async with connected(app, mode) as client:
            # When she reads their ui:// pages
            return [
                await client.read_resource("ui://jobs/hostile-result-0001/result.html"),
                await client.read_resource("ui://jobs/hostile-error-0002/result.html"),
            ]

    pages = [read.contents[0] for read in anyio.run(scenario)]

    # Then each is an MCP App page in which the markup is text: escaped, never live
    for page in pages:
        assert page.mime_type == APP_MIME_TYPE
        assert "<script>" not in page.text and "<img" not in page.text
        assert "&lt;script&gt;" in page.text
    assert html.escape("&amp;") in pages[0].text  # escaped once more: shown as written
    assert "DatasetNotFound" in pages[1].text


@pytest.mark.parametrize("mode", ERAS)
@pytest.mark.parametrize(
    "uri",
    ["ui://jobs/no-such-job-0009/result.html", 'ui://jobs/"><script>x</script>/result.html', "ui://other/x.html"],
    ids=["unknown", "hostile-id", "unknown-view"],
)
def test_a_page_of_no_job_of_the_callers_is_not_found(app, mode, uri):
    # Given the endpoint
    async def scenario() -> MCPError:
        async with connected(app, mode) as client:
            # When a view of no job of the caller's is read
            with pytest.raises(MCPError) as refused:
                await client.read_resource(uri)
            return refused.value

    refused = anyio.run(scenario)

    # Then it is "Resource not found", without echoing markup in a page
    assert refused.error.message == "Resource not found"
