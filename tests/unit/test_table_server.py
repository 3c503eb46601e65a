"""The tool table is the SDK server's tool registry: tools/list publishes each tool's strict input model, and a
tools/call runs the table's tool, answering its object as structuredContent and text; a reported failure keeps
its message, anything else is logged and answered without its text."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import anyio
import pytest
from mcp.server.extension import MethodBinding
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolRequestParams, RequestParams

from mcp_backend.api_keys import Principal
from mcp_backend.mcp.auth import CALLER
from mcp_backend.mcp.bindings import ToolBindings, task_execution
from mcp_backend.mcp.table_server import table_server
from mcp_backend.tools.context import StrictInput, ToolContext, ToolOutput
from mcp_backend.tools.errors import DatasetAccessDenied
from mcp_backend.tools.table import TOOLS, Access, Effect, Mode, Tool
from tests.unit.test_tool_contract import services_of


class EchoInput(StrictInput):
    text: str


class EchoOutput(ToolOutput):
    echo: str
    caller: str


def echo(request: EchoInput, context: ToolContext) -> dict[str, Any]:
    if request.text == "refuse":
        raise DatasetAccessDenied("not yours")
    if request.text == "crash":
        raise RuntimeError("secret-bucket-name in a raw message")
    return {"echo": request.text, "caller": context.user_id}


TABLE = {
    "echo": Tool(
        name="echo",
        description="Echo the text.",
        input_model=EchoInput,
        run=echo,
        access=Access.READ,
        services=frozenset(),
        effect=Effect.NONE,
        output_model=EchoOutput,
    )
}


@pytest.fixture(autouse=True)
def alice_calls() -> Iterator[None]:
    """The caller the guard would have set for the request (the SDK's handlers run in the request's context)."""
    token = CALLER.set(Principal(user_id="user-alice"))
    yield
    CALLER.reset(token)


def caller_context() -> Any:
    """What the SDK hands a handler: the request and its params (no progress token)."""
    return SimpleNamespace(request=SimpleNamespace(scope={}), params={})


def call(bindings: ToolBindings, name: str, arguments: dict[str, Any]) -> Any:
    params = CallToolRequestParams(name=name, arguments=arguments)
    return anyio.run(bindings.call_tool, caller_context(), params)


@pytest.fixture
def bindings() -> ToolBindings:
    return ToolBindings(TABLE, services_of("McpServer"))


def test_the_listing_publishes_each_tools_strict_model_its_output_model_and_annotations(bindings):
    # When the SDK asks for the tools
    listed = anyio.run(bindings.list_tools, caller_context(), None)

    # Then the table's tool is there with its model's schema (unknown fields refused), its output model's schema
    (tool,) = listed.tools
    assert tool.name == "echo" and tool.input_schema == EchoInput.model_json_schema()
    assert tool.input_schema["additionalProperties"] is False
    assert tool.output_schema == EchoOutput.model_json_schema()
    assert tool.output_schema["required"] == ["echo", "caller"]
    # And annotations derived from its declaration: a READ tool that changes nothing and stays in the deployment
    assert tool.annotations is not None
    assert tool.annotations.model_dump(exclude_none=True) == {
        "title": "Echo",
        "read_only_hint": True,
        "destructive_hint": False,
        "idempotent_hint": True,
        "open_world_hint": False,
    }
    # And the listing may be reused by any caller for an hour, and is built once
    assert (listed.ttl_ms, listed.cache_scope) == (3_600_000, "public")
    assert anyio.run(bindings.list_tools, caller_context(), None) is listed
    assert bindings.input_schema("echo") == tool.input_schema and bindings.input_schema("nope") is None


def test_a_call_answers_the_tools_object_as_structured_content_and_text(bindings):
    # When the tool is called for the guard's principal
    result = call(bindings, "echo", {"text": "hi"})

    # Then the object is the structured content, and the same as JSON text
    assert not result.is_error
    assert result.structured_content == {"echo": "hi", "caller": "user-alice"}
    assert json.loads(result.content[0].text) == result.structured_content


def test_a_reported_failure_keeps_its_message_and_a_crash_is_logged_without_its_text(bindings, caplog):
    # When the tool reports a failure, crashes, and an unknown tool is called
    refused = call(bindings, "echo", {"text": "refuse"})
    crashed = call(bindings, "echo", {"text": "crash"})
    unknown = call(bindings, "nope", {})

    # Then each is a tool execution error; only the reported one carries the tool's message
    assert refused.is_error and refused.content[0].text == "Error executing tool echo: DatasetAccessDenied: not yours"
    assert crashed.is_error and crashed.content[0].text == "Error executing tool echo"
    assert unknown.is_error and unknown.content[0].text == "Unknown tool: nope"
    # And the crash is logged as an error, for the operator
    assert any(r.levelname == "ERROR" and getattr(r, "tool", None) == "echo" for r in caplog.records)


def test_the_real_tables_annotations_follow_what_each_tool_declares():
    # Given the MCP endpoint's bindings of the tool table
    bindings = ToolBindings(TOOLS, services_of("McpServer"))

    # When the SDK asks for the tools
    listed = anyio.run(bindings.list_tools, caller_context(), None)

    # Then reads are read-only; cancel, register (re-registration replaces) and unregister are destructive but
    # safe to repeat; a submission adds a job each call (idempotent only with a callId, which the hint cannot
    # know); whatever fetches from the network, itself or through its job, is open-world
    hints = {
        tool.name: tuple(
            getattr(tool.annotations, hint)
            for hint in ("read_only_hint", "destructive_hint", "idempotent_hint", "open_world_hint")
        )
        for tool in listed.tools
    }
    assert hints == {
        "get_job": (True, False, True, False),
        "list_failed_jobs": (True, False, True, False),
        "list_endpoints": (True, False, True, False),
        "endpoint_status": (True, False, True, False),
        "cancel_job": (False, True, True, False),
        "register_endpoint": (False, True, True, False),
        "unregister_endpoint": (False, True, True, False),
        "analyze_dataset": (False, False, True, True),
        "submit_analysis": (False, False, False, True),
        "submit_analyses": (False, False, False, True),
    }
    assert {tool.name: tool.annotations.title for tool in listed.tools if tool.annotations}["submit_analyses"] == (
        "Submit analyses"
    )


@pytest.mark.parametrize(("mode", "task_support"), [(Mode.SYNC, None), (Mode.BOTH, "optional"), (Mode.JOB, "required")])
def test_a_tools_task_support_follows_how_it_runs(mode, task_support):
    # Given a tool that runs now, both now and as a job, or only as a job
    tool = replace(TABLE["echo"], mode=mode)

    # When its 2025-11-25 execution is derived
    execution = task_execution(tool)

    # Then a job-capable tool takes a task ("required" when it only runs as a job), and the others none
    assert (execution.task_support if execution else None) == task_support


def era_binding(versions: frozenset[str] | None, answer: str, params_type: type = RequestParams) -> MethodBinding:
    async def handler(ctx: Any, params: Any) -> dict[str, Any]:
        return {"era": answer}

    return MethodBinding("tasks/get", params_type, handler, protocol_versions=versions)


def test_a_method_bound_in_two_eras_answers_each_era_with_its_own_binding(bindings):
    # Given tasks/get bound once for 2026-07-28 and once for 2025-11-25
    modern, legacy = era_binding(frozenset({"2026-07-28"}), "modern"), era_binding(frozenset({"2025-11-25"}), "legacy")
    server = table_server("t", "", bindings, methods=[modern, legacy])
    handler = server.get_request_handler("tasks/get")
    assert handler is not None

    async def ask(version: str) -> Any:
        return await handler.handler(SimpleNamespace(protocol_version=version), RequestParams())

    # When each era asks, and an era bound by neither asks
    answers = [anyio.run(ask, version) for version in ("2026-07-28", "2025-11-25")]
    with pytest.raises(MCPError) as unbound:
        anyio.run(ask, "2025-06-18")

    # Then each era gets its own binding's answer, and the other is method not found
    assert answers == [{"era": "modern"}, {"era": "legacy"}]
    assert unbound.value.error.code == -32601


def test_bindings_of_one_method_that_disagree_on_params_or_overlap_are_refused(bindings):
    # Given bindings of tasks/get with different params models, and one bound in every era beside another
    other_params = era_binding(frozenset({"2025-11-25"}), "legacy", CallToolRequestParams)

    # When a server is built with them, then it is refused
    with pytest.raises(ValueError, match="same params model"):
        table_server("t", "", bindings, methods=[era_binding(frozenset({"2026-07-28"}), "modern"), other_params])
    with pytest.raises(ValueError, match="every era"):
        table_server("t", "", bindings, methods=[era_binding(None, "all"), era_binding(frozenset({"x"}), "x")])
