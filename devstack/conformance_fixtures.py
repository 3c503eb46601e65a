"""The fixtures the official MCP conformance suite's server scenarios call by name (`test://static-text`,
`test_simple_prompt` ...), as entries of the endpoint's own resource and prompt tables: they go through the same
guard, door table, bindings and validation as the backend's own.

Served only by the local stack (`make dev CONFORMANCE=1`: `DevStackOptions.conformance_fixtures`) and by tests.
Nothing under layers/ or functions/ imports this module, no build contains devstack/, and the endpoint takes other
tables only as an argument of `create_app` in code: no template parameter or variable can switch them on in a
deployed stack (tests/functions/test_conformance_fixtures.py checks both).

The suite's elicitation tools (`test_elicitation` and the SEP-1034 and SEP-1330 ones) are entries of the tool
table that ask their user (`asks`): a 2025-era client that declared elicitation is asked on the call's stream
(mcp_backend.mcp.open_stream).

The suite's content tools (`test_image_content`, `test_audio_content`, `test_embedded_resource`,
`test_multiple_content_types`) are tools without an output model: they answer the SDK's content blocks. Its progress
tool (`test_tool_with_progress`) reports progress through `ctx.progress`, which a synchronous tool gets when the
client sent a progress token.

The texts are the ones the suite's scenario descriptions give (@modelcontextprotocol/conformance 0.1.16).
"""

from __future__ import annotations

import base64
import io
import json
import struct
import time
import wave
import zlib
from typing import Any

from mcp_types import AudioContent, ContentBlock, EmbeddedResource, ImageContent, TextContent, TextResourceContents
from pydantic import BaseModel, Field
from starlette.types import ASGIApp

from mcp_backend.mcp.server import create_app as create_endpoint
from mcp_backend.tools.context import StrictInput, ToolContext
from mcp_backend.tools.prompts import PROMPTS, Prompt, PromptLine
from mcp_backend.tools.resources import RESOURCES, NoVariables, ResourceBytes, ResourceKind, ResourceText
from mcp_backend.tools.table import TOOLS, Access, Effect, Tool

TEXT = "text/plain"
PNG = "image/png"
STATIC_TEXT = "This is the content of the static text resource."
SIMPLE_PROMPT = "This is a simple prompt for testing."
EMBEDDED_TEXT = "This is an embedded resource content."
WAV = "audio/wav"
MIXED_TEXT = "Multiple content types test:"
MIXED_RESOURCE = {"test": "data", "value": 123}
PROGRESS_DONE = "Progress test completed"
# The suite's progress tool reports 0, 50 and 100 of 100, about 50 ms apart.
PROGRESS_STEPS = (0.0, 0.5, 1.0)
PROGRESS_PAUSE_SECONDS = 0.05
# What completion offers for test_prompt_with_arguments' arg1 (the suite's example values).
ARG1_VALUES = ("paris", "park", "party")


def one_pixel_png() -> bytes:
    """A 1x1 red PNG (signature, IHDR, one IDAT row, IEND), as the suite's image scenarios suggest."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)  # 1x1, 8-bit RGB
    pixels = zlib.compress(b"\x00\xff\x00\x00")  # filter byte, then red
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")


def silent_wav() -> bytes:
    """A tenth of a second of 8 kHz 16-bit mono silence, as a WAV file (the suite asks for a minimal one)."""
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as audio:
        audio.setnchannels(1)
        audio.setsampwidth(2)
        audio.setframerate(8000)
        audio.writeframes(b"\x00\x00" * 800)
    return buffer.getvalue()


def encoded(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


class TemplateVariables(StrictInput):
    id: str = Field(min_length=1, max_length=64)


class NoArguments(StrictInput):
    pass


class TwoArguments(StrictInput):
    arg1: str = Field(max_length=256, description="First test argument")
    arg2: str = Field(max_length=256, description="Second test argument")


class ResourceArgument(StrictInput):
    resourceUri: str = Field(max_length=256, description="URI of the resource to embed")


def read_static_text(variables: NoVariables, ctx: ToolContext) -> ResourceText:
    return ResourceText(STATIC_TEXT, TEXT)


def read_static_binary(variables: NoVariables, ctx: ToolContext) -> ResourceBytes:
    return ResourceBytes(one_pixel_png(), PNG)


def read_template_data(variables: TemplateVariables, ctx: ToolContext) -> ResourceText:
    data = {"id": variables.id, "templateTest": True, "data": f"Data for ID: {variables.id}"}
    return ResourceText(json.dumps(data), "application/json")


def simple_prompt(arguments: NoArguments, ctx: ToolContext) -> list[PromptLine]:
    return [PromptLine(SIMPLE_PROMPT)]


def prompt_with_arguments(arguments: TwoArguments, ctx: ToolContext) -> list[PromptLine]:
    return [PromptLine(f"Prompt with arguments: arg1='{arguments.arg1}', arg2='{arguments.arg2}'")]


def prompt_with_embedded_resource(arguments: ResourceArgument, ctx: ToolContext) -> list[PromptLine]:
    return [
        PromptLine(EMBEDDED_TEXT, link_uri=arguments.resourceUri, mime_type=TEXT, embed=True),
        PromptLine("Please process the embedded resource above."),
    ]


def prompt_with_image(arguments: NoArguments, ctx: ToolContext) -> list[PromptLine]:
    return [PromptLine("", image=one_pixel_png(), mime_type=PNG), PromptLine("Please analyze the image above.")]


class MessageArgument(StrictInput):
    message: str = Field(max_length=1024, description="The message to show the user")


class ElicitationOutcome(BaseModel):
    text: str


USER_DETAILS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "username": {"type": "string", "description": "User's response"},
        "email": {"type": "string", "description": "User's email address"},
    },
    "required": ["username", "email"],
}
# SEP-1034: a default for every primitive type.
DEFAULTS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "default": "John Doe"},
        "age": {"type": "integer", "default": 30},
        "score": {"type": "number", "default": 95.5},
        "status": {"type": "string", "enum": ["active", "inactive", "pending"], "default": "active"},
        "verified": {"type": "boolean", "default": True},
    },
}
# SEP-1330: the five enum forms.
ENUMS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "untitledSingle": {"type": "string", "enum": ["option1", "option2", "option3"]},
        "titledSingle": {
            "type": "string",
            "oneOf": [
                {"const": "value1", "title": "First Option"},
                {"const": "value2", "title": "Second Option"},
                {"const": "value3", "title": "Third Option"},
            ],
        },
        "legacyEnum": {
            "type": "string",
            "enum": ["opt1", "opt2", "opt3"],
            "enumNames": ["Option One", "Option Two", "Option Three"],
        },
        "untitledMulti": {"type": "array", "items": {"type": "string", "enum": ["option1", "option2", "option3"]}},
        "titledMulti": {
            "type": "array",
            "items": {
                "anyOf": [
                    {"const": "value1", "title": "First Choice"},
                    {"const": "value2", "title": "Second Choice"},
                    {"const": "value3", "title": "Third Choice"},
                ]
            },
        },
    },
}


def ask_user_details(arguments: MessageArgument, ctx: ToolContext) -> dict[str, Any]:
    answer = ctx.elicit(arguments.message, USER_DETAILS_SCHEMA)
    return {"text": f"User response: action={answer['action']}, content={json.dumps(answer.get('content'))}"}


def ask_with_defaults(arguments: NoArguments, ctx: ToolContext) -> dict[str, Any]:
    answer = ctx.elicit("Please review and update the form fields with defaults", DEFAULTS_SCHEMA)
    return {"text": f"Elicitation completed: action={answer['action']}, content={json.dumps(answer.get('content'))}"}


def ask_with_enums(arguments: NoArguments, ctx: ToolContext) -> dict[str, Any]:
    answer = ctx.elicit("Please select options from the enum fields", ENUMS_SCHEMA)
    return {"text": f"Elicitation completed: action={answer['action']}, content={json.dumps(answer.get('content'))}"}


def image_content(arguments: NoArguments, ctx: ToolContext) -> list[ContentBlock]:
    return [ImageContent(type="image", data=encoded(one_pixel_png()), mime_type=PNG)]


def audio_content(arguments: NoArguments, ctx: ToolContext) -> list[ContentBlock]:
    return [AudioContent(type="audio", data=encoded(silent_wav()), mime_type=WAV)]


def embedded_resource(arguments: NoArguments, ctx: ToolContext) -> list[ContentBlock]:
    contents = TextResourceContents(uri="test://embedded-resource", mime_type=TEXT, text=EMBEDDED_TEXT)
    return [EmbeddedResource(type="resource", resource=contents)]


def mixed_content(arguments: NoArguments, ctx: ToolContext) -> list[ContentBlock]:
    contents = TextResourceContents(
        uri="test://mixed-content-resource", mime_type="application/json", text=json.dumps(MIXED_RESOURCE)
    )
    return [
        TextContent(type="text", text=MIXED_TEXT),
        *image_content(arguments, ctx),
        EmbeddedResource(type="resource", resource=contents),
    ]


def report_progress(arguments: NoArguments, ctx: ToolContext) -> list[ContentBlock]:
    for step, fraction in enumerate(PROGRESS_STEPS):
        if step:
            time.sleep(PROGRESS_PAUSE_SECONDS)  # the suite's pacing: the reports are apart, not one burst
        if ctx.progress is not None:
            ctx.progress(fraction, f"{fraction:.0%}")
    return [TextContent(type="text", text=PROGRESS_DONE)]


def arg1_values(prefix: str, ctx: ToolContext) -> list[str]:
    return [value for value in ARG1_VALUES if value.startswith(prefix)]


def _kind(name: str, uri_template: str, variables: Any, mime_type: str, read: Any) -> ResourceKind:
    return ResourceKind(
        name=name,
        uri_template=uri_template,
        variables=variables,
        title=name,
        description=f"Conformance fixture {uri_template}",
        mime_type=mime_type,
        read=read,
        access=Access.READ,
        services=frozenset(),
    )


def _prompt(name: str, arguments: Any, render: Any, **extra: Any) -> Prompt:
    return Prompt(
        name=name,
        title=name,
        description=f"Conformance fixture {name}",
        arguments_model=arguments,
        render=render,
        access=Access.READ,
        services=frozenset(),
        **extra,
    )


def _tool(name: str, arguments: type[StrictInput], run: Any, asks: bool = False) -> Tool:
    """A READ tool that changes nothing: one that asks its user reports the answer as JSON; the others answer
    MCP content blocks (no output model)."""
    return Tool(
        name=name,
        description=f"Conformance fixture {name}: "
        + ("asks its user (elicitation/create) and reports the answer." if asks else "answers MCP content blocks."),
        input_model=arguments,
        run=run,
        output_model=ElicitationOutcome if asks else None,
        access=Access.READ,
        services=frozenset(),
        effect=Effect.NONE,
        asks=asks,
    )


FIXTURE_TOOLS: dict[str, Tool] = {
    tool.name: tool
    for tool in (
        _tool("test_elicitation", MessageArgument, ask_user_details, asks=True),
        _tool("test_elicitation_sep1034_defaults", NoArguments, ask_with_defaults, asks=True),
        _tool("test_elicitation_sep1330_enums", NoArguments, ask_with_enums, asks=True),
        _tool("test_image_content", NoArguments, image_content),
        _tool("test_audio_content", NoArguments, audio_content),
        _tool("test_embedded_resource", NoArguments, embedded_resource),
        _tool("test_multiple_content_types", NoArguments, mixed_content),
        _tool("test_tool_with_progress", NoArguments, report_progress),
    )
}
FIXTURE_RESOURCES: dict[str, ResourceKind] = {
    kind.name: kind
    for kind in (
        _kind("test-static-text", "test://static-text", NoVariables, TEXT, read_static_text),
        _kind("test-static-binary", "test://static-binary", NoVariables, PNG, read_static_binary),
        _kind("test-template", "test://template/{id}/data", TemplateVariables, "application/json", read_template_data),
    )
}
FIXTURE_PROMPTS: dict[str, Prompt] = {
    prompt.name: prompt
    for prompt in (
        _prompt("test_simple_prompt", NoArguments, simple_prompt),
        _prompt("test_prompt_with_arguments", TwoArguments, prompt_with_arguments, completions={"arg1": arg1_values}),
        _prompt("test_prompt_with_embedded_resource", ResourceArgument, prompt_with_embedded_resource),
        _prompt("test_prompt_with_image", NoArguments, prompt_with_image),
    )
}
# The backend's tables with the fixtures beside them: the suite's list scenarios still see the real entries.
TOOLS_WITH_FIXTURES = {**TOOLS, **FIXTURE_TOOLS}
RESOURCES_WITH_FIXTURES = {**RESOURCES, **FIXTURE_RESOURCES}
PROMPTS_WITH_FIXTURES = {**PROMPTS, **FIXTURE_PROMPTS}


def create_app(*arguments: Any, **options: Any) -> ASGIApp:
    """The endpoint (`mcp_backend.mcp.server.create_app`, same arguments) with the conformance fixtures."""
    return create_endpoint(
        *arguments,
        resource_table=RESOURCES_WITH_FIXTURES,
        prompt_table=PROMPTS_WITH_FIXTURES,
        tool_table=TOOLS_WITH_FIXTURES,
        **options,
    )
