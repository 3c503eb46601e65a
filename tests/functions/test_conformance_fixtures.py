"""The conformance suite's fixtures (devstack/conformance_fixtures.py) through the SDK's own client, in both
protocol eras, over the in-process endpoint on the template's tables (moto): served by the endpoint the local
stack and tests build with them, through the same tables and bindings as the backend's own; absent from the
endpoint every deployed stack builds, and out of reach of the template and of every build."""

from __future__ import annotations

import base64
import json
import re
from contextlib import AbstractAsyncContextManager
from dataclasses import replace
from typing import Any

import anyio
import boto3
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, ImageContent, PromptReference
from starlette.types import ASGIApp

from devstack import conformance_fixtures
from devstack.stack.template import ROOT
from mcp_backend.api_keys import Principal
from mcp_backend.config import McpSettings, load_settings
from mcp_backend.mcp.bindings import MAX_CONTENT_BYTES
from mcp_backend.mcp.resources import RESOURCE_NOT_FOUND
from mcp_backend.mcp.server import create_app
from mcp_backend.tools.table import TOOLS
from tests.unit.endpoint_fakes import EveryoneIs
from tests.unit.sdk_client import sdk_client

ERAS = ["legacy", "2026-07-28"]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def settings(local) -> McpSettings:
    return load_settings(McpSettings, dict(local.stack.function("McpServer").environment))


def connected(app: ASGIApp, mode: str) -> AbstractAsyncContextManager[Client]:
    return sdk_client(app, mode)


@pytest.mark.parametrize("mode", ERAS)
def test_the_fixture_set_serves_the_suites_resources(settings, mode):
    # Given the endpoint built with the conformance fixtures
    app = conformance_fixtures.create_app(settings, EveryoneIs(Principal(user_id="user-alice")), boto3.client)

    async def scenario() -> list[Any]:
        async with connected(app, mode) as client:
            # When a client reads the suite's static text, static binary and templated resources
            return [
                await client.read_resource("test://static-text"),
                await client.read_resource("test://static-binary"),
                await client.read_resource("test://template/123/data"),
            ]

    text, binary, templated = anyio.run(scenario)

    # Then the text is the suite's, the binary a PNG sent base64, and the template's id is substituted
    assert text.contents[0].text == conformance_fixtures.STATIC_TEXT
    assert text.contents[0].mime_type == "text/plain"
    assert binary.contents[0].mime_type == "image/png"
    assert base64.b64decode(binary.contents[0].blob).startswith(PNG_SIGNATURE)
    assert json.loads(templated.contents[0].text) == {"id": "123", "templateTest": True, "data": "Data for ID: 123"}


@pytest.mark.parametrize("mode", ERAS)
def test_the_fixture_set_serves_the_suites_prompts_and_completion(settings, mode):
    # Given the endpoint built with the conformance fixtures
    app = conformance_fixtures.create_app(settings, EveryoneIs(Principal(user_id="user-alice")), boto3.client)

    async def scenario() -> list[Any]:
        async with connected(app, mode) as client:
            # When a client gets each of the suite's prompts, completes one argument and omits a required one
            got = [
                await client.get_prompt("test_simple_prompt"),
                await client.get_prompt("test_prompt_with_arguments", {"arg1": "hello", "arg2": "world"}),
                await client.get_prompt("test_prompt_with_embedded_resource", {"resourceUri": "test://example"}),
                await client.get_prompt("test_prompt_with_image"),
                await client.complete(
                    PromptReference(name="test_prompt_with_arguments"), {"name": "arg1", "value": "par"}
                ),
            ]
            with pytest.raises(MCPError) as refused:
                await client.get_prompt("test_prompt_with_arguments", {"arg1": "hello"})
            return [*got, refused.value]

    simple, with_arguments, embedded, image, completion, refused = anyio.run(scenario)

    # Then each renders as the suite describes: text, substituted arguments, an embedded resource, an image
    assert simple.messages[0].content.text == conformance_fixtures.SIMPLE_PROMPT
    assert with_arguments.messages[0].content.text == "Prompt with arguments: arg1='hello', arg2='world'"
    resource = embedded.messages[0].content
    assert (resource.type, resource.resource.uri, resource.resource.text) == (
        "resource",
        "test://example",
        conformance_fixtures.EMBEDDED_TEXT,
    )
    picture = image.messages[0].content
    assert picture.type == "image" and picture.mime_type == "image/png"
    assert base64.b64decode(picture.data).startswith(PNG_SIGNATURE)
    assert completion.completion.values == ["paris", "park", "party"]
    # And a missing argument is refused as the backend's prompts are: invalid params naming it
    assert refused.error.code == INVALID_PARAMS
    assert refused.error.message == "test_prompt_with_arguments: arg2: Field required"


@pytest.mark.parametrize("mode", ERAS)
def test_a_content_tools_blocks_arrive_as_it_sent_them(settings, mode):
    # Given the endpoint built with the conformance fixtures, whose content tools answer the SDK's content blocks
    app = conformance_fixtures.create_app(settings, EveryoneIs(Principal(user_id="user-alice")), boto3.client)
    context: Any = None
    sent = {
        name: [block.model_dump(by_alias=True, exclude_none=True) for block in tool.run(None, context)]
        for name, tool in conformance_fixtures.FIXTURE_TOOLS.items()
        if tool.output_model is None and name != "test_tool_with_progress"
    }

    async def scenario() -> dict[str, Any]:
        async with connected(app, mode) as client:
            # When a client calls each of them
            return {name: await client.call_tool(name, {}) for name in sent}

    answers = anyio.run(scenario)

    # Then each answer is the blocks as the tool built them, with no structuredContent, and no error
    assert sorted(sent) == [
        "test_audio_content",
        "test_embedded_resource",
        "test_image_content",
        "test_multiple_content_types",
    ]
    for name, answer in answers.items():
        assert answer.is_error is not True, name
        assert answer.structured_content is None, name
        assert [block.model_dump(by_alias=True, exclude_none=True) for block in answer.content] == sent[name]
    # And the blocks are what the suite asks for: a PNG, a WAV, an embedded text resource, and the three mixed
    image, audio = answers["test_image_content"].content[0], answers["test_audio_content"].content[0]
    assert base64.b64decode(image.data).startswith(PNG_SIGNATURE) and image.mime_type == "image/png"
    assert base64.b64decode(audio.data)[:4] == b"RIFF" and audio.mime_type == "audio/wav"
    embedded = answers["test_embedded_resource"].content[0].resource
    assert (embedded.uri, embedded.text) == ("test://embedded-resource", conformance_fixtures.EMBEDDED_TEXT)
    assert [block.type for block in answers["test_multiple_content_types"].content] == ["text", "image", "resource"]


@pytest.mark.parametrize("mode", ERAS)
def test_an_oversized_content_answer_is_a_tool_error_naming_the_limit(settings, mode):
    # Given a tool whose image data alone is as large as the content limit (its block's JSON is over it)
    oversized = ImageContent(type="image", data="A" * MAX_CONTENT_BYTES, mime_type="image/png")
    image_tool = conformance_fixtures.FIXTURE_TOOLS["test_image_content"]
    big = replace(image_tool, name="big_image", run=lambda *_: [oversized])
    app = create_app(
        settings, EveryoneIs(Principal(user_id="user-alice")), boto3.client, tool_table={**TOOLS, big.name: big}
    )

    async def scenario() -> Any:
        async with connected(app, mode) as client:
            # When a client calls it
            return await client.call_tool("big_image", {})

    answer = anyio.run(scenario)

    # Then the answer is a tool error naming the limit in bytes, and none of the image is sent
    size = len(oversized.model_dump_json(by_alias=True, exclude_none=True))
    assert answer.is_error is True
    assert [block.text for block in answer.content] == [
        f"Error executing tool big_image: ContentTooLarge: the answer is {size} bytes of content; "
        f"the limit is {MAX_CONTENT_BYTES} bytes"
    ]


def test_an_answer_that_is_not_content_blocks_is_a_tool_error(settings):
    # Given a content tool whose run answers a plain dict inside the list, not one of the SDK's content blocks
    image_tool = conformance_fixtures.FIXTURE_TOOLS["test_image_content"]
    odd = replace(image_tool, name="odd_answer", run=lambda *_: [{"type": "text", "text": "hand-made"}])
    app = create_app(
        settings, EveryoneIs(Principal(user_id="user-alice")), boto3.client, tool_table={**TOOLS, odd.name: odd}
    )

    async def scenario() -> Any:
        async with connected(app, "legacy") as client:
            # When a client calls it
            return await client.call_tool("odd_answer", {})

    answer = anyio.run(scenario)

    # Then it is refused as a tool error saying why, and the hand-made block is not sent
    assert answer.is_error is True
    assert [block.text for block in answer.content] == [
        "Error executing tool odd_answer: InvalidToolAnswer: the tool answered something other than MCP content blocks"
    ]


@pytest.mark.parametrize("mode", ERAS)
def test_a_tool_reports_progress_before_its_result_when_the_client_asks(settings, mode):
    # Given the endpoint with the suite's progress tool, which does not stream progress on its own
    app = conformance_fixtures.create_app(settings, EveryoneIs(Principal(user_id="user-alice")), boto3.client)
    assert not conformance_fixtures.FIXTURE_TOOLS["test_tool_with_progress"].streams_progress
    events: list[Any] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        events.append(("progress", progress, total))

    async def scenario() -> list[Any]:
        async with connected(app, mode) as client:
            # When a client calls it with a progress callback (a progressToken), then without one
            answer = await client.call_tool("test_tool_with_progress", {}, progress_callback=on_progress)
            events.append(("result", answer.content[0].text))
            quiet = await client.call_tool("test_tool_with_progress", {})
            events.append(("result", quiet.content[0].text))
            return events

    anyio.run(scenario)

    # Then the three reports arrive, increasing, before the first result; the call without a token gets none
    done = conformance_fixtures.PROGRESS_DONE
    assert events == [
        ("progress", 0.0, 1.0),
        ("progress", 0.5, 1.0),
        ("progress", 1.0, 1.0),
        ("result", done),
        ("result", done),
    ]


def test_the_endpoint_a_deployed_stack_builds_serves_no_fixture(settings):
    # Given the endpoint as McpServer builds it (its run.sh: mcp_backend.mcp.server:create_app)
    app = create_app(settings, EveryoneIs(Principal(user_id="user-alice")), boto3.client)

    async def scenario() -> list[MCPError]:
        refusals = []
        async with connected(app, "legacy") as client:
            # When a client asks for a fixture resource and a fixture prompt
            for ask in (client.read_resource("test://static-text"), client.get_prompt("test_simple_prompt")):
                with pytest.raises(MCPError) as refused:
                    await ask
                refusals.append(refused.value)
        return refusals

    resource, prompt = anyio.run(scenario)

    # Then neither exists there
    assert resource.error.code == RESOURCE_NOT_FOUND
    assert prompt.error.code == INVALID_PARAMS and prompt.error.message == "Unknown prompt"


def test_nothing_a_deployment_contains_or_sets_can_switch_the_fixtures_on():
    # Given what a deployment is made of: the template and the folders its functions and layers are built from
    template = (ROOT / "template.yaml").read_text()
    built = set(re.findall(r"(?:CodeUri|ContentUri): (\S+)", template))
    assert built and all(not folder.startswith("devstack") for folder in built)
    sources = [path for folder in built for path in (ROOT / folder).rglob("*.py")]
    importing = re.compile(r"^\s*(?:from|import)\s+devstack\b", re.MULTILINE)

    # Then no built module imports the local stack, and no line of the template names the fixtures (the
    # endpoint takes other tables only as an argument in code)
    assert len(sources) > 100
    assert [path for path in sources if importing.search(path.read_text())] == []
    assert "conformance" not in template
    assert (
        "McpServer" in template
        and (ROOT / "functions/mcp_server/run.sh").read_text().count("mcp_backend.mcp.server:create_app") == 1
    )
