"""The fixtures the official MCP conformance suite's server scenarios call by name (`test://static-text`,
`test_simple_prompt` ...), as entries of the endpoint's own resource and prompt tables: they go through the same
guard, door table, bindings and validation as the backend's own.

Served only by the local stack (`make dev CONFORMANCE=1`: `DevStackOptions.conformance_fixtures`) and by tests.
Nothing under layers/ or functions/ imports this module, no build contains devstack/, and the endpoint takes other
tables only as an argument of `create_app` in code: no template parameter or variable can switch them on in a
deployed stack (tests/functions/test_conformance_fixtures.py checks both).

The texts are the ones the suite's scenario descriptions give (@modelcontextprotocol/conformance 0.1.16).
"""

from __future__ import annotations

import json
import struct
import zlib
from typing import Any

from pydantic import Field
from starlette.types import ASGIApp

from mcp_backend.mcp.server import create_app as create_endpoint
from mcp_backend.tools.context import StrictInput, ToolContext
from mcp_backend.tools.prompts import PROMPTS, Prompt, PromptLine
from mcp_backend.tools.resources import RESOURCES, NoVariables, ResourceBytes, ResourceKind, ResourceText
from mcp_backend.tools.table import Access

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
RESOURCES_WITH_FIXTURES = {**RESOURCES, **FIXTURE_RESOURCES}
PROMPTS_WITH_FIXTURES = {**PROMPTS, **FIXTURE_PROMPTS}


def create_app(*arguments: Any, **options: Any) -> ASGIApp:
    """The endpoint (`mcp_backend.mcp.server.create_app`, same arguments) with the conformance fixtures."""
    return create_endpoint(
        *arguments, resource_table=RESOURCES_WITH_FIXTURES, prompt_table=PROMPTS_WITH_FIXTURES, **options
    )
