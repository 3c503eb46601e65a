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

The texts are the ones the suite's scenario descriptions give (@modelcontextprotocol/conformance 0.1.16).
"""

from __future__ import annotations

import json
import struct
import zlib
from typing import Any

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
# What completion offers for test_prompt_with_arguments' arg1 (the suite's example values).
ARG1_VALUES = ("paris", "park", "party")


def one_pixel_png() -> bytes:
    """A 1x1 red PNG (signature, IHDR, one IDAT row, IEND), as the suite's image scenarios suggest."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)  # 1x1, 8-bit RGB
    pixels = zlib.compress(b"\x00\xff\x00\x00")  # filter byte, then red
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")


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


def _asking_tool(name: str, arguments: type[StrictInput], run: Any) -> Tool:
    return Tool(
        name=name,
        description=f"Conformance fixture {name}: asks its user (elicitation/create) and reports the answer.",
        input_model=arguments,
        run=run,
        output_model=ElicitationOutcome,
        access=Access.READ,
        services=frozenset(),
        effect=Effect.NONE,
        asks=True,
    )


FIXTURE_TOOLS: dict[str, Tool] = {
    tool.name: tool
    for tool in (
        _asking_tool("test_elicitation", MessageArgument, ask_user_details),
        _asking_tool("test_elicitation_sep1034_defaults", NoArguments, ask_with_defaults),
        _asking_tool("test_elicitation_sep1330_enums", NoArguments, ask_with_enums),
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
