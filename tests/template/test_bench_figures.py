"""The figures `make bench` writes to docs/benchmarks.json, checked for structure, never for speed: every
function of the template is measured, only the functions that serve MCP load the MCP stack, and the
endpoint is measured against the stock SDK app in both phases; a function that imports the MCP stack has the
MCP layer, and nothing loads the X-Ray SDK."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from devstack.stack.template import load_template
from tests.bench.functions import OPTIONAL_PARTS, layers_unzipped_bytes
from tests.template.test_invariants import resolve, scope

FIGURES = Path(__file__).resolve().parents[2] / "docs" / "benchmarks.json"
MCP_STACK = {"mcp", "mcp_types", "starlette", "uvicorn", "sse_starlette"}


@pytest.fixture(scope="module")
def figures() -> dict:
    return json.loads(FIGURES.read_text())


def functions_of_template() -> dict[str, dict]:
    # The default stack's functions and those of the parts the bench turns on for them (OPTIONAL_PARTS); another
    # optional one (a parameter creates it, e.g. the authorization server) is not in the bench's stacks.
    functions = load_template().resources("AWS::Lambda::Function")
    stacks = (scope(), scope(**OPTIONAL_PARTS))
    return {
        logical_id: function
        for logical_id, function in functions.items()
        if "Condition" not in function or any(stack.condition(function["Condition"]) for stack in stacks)
    }


def serves_mcp(function: dict) -> bool:
    # The MCP endpoint is the function started by a start script (the web adapter runs its uvicorn).
    return function["Properties"]["Handler"].endswith(".sh")


def test_every_function_of_the_template_is_measured(figures):
    # Given the functions the template declares
    declared = set(functions_of_template())
    # When the bench's per-function figures are read
    measured = figures["functions"]["functions"]
    # Then each one was imported, and what it loaded was recorded (its own package at least)
    assert set(measured) == declared
    assert all("mcp_backend" in entry["packages"] for entry in measured.values())


@pytest.mark.parametrize("function_id", sorted(functions_of_template()))
def test_only_functions_that_serve_mcp_load_the_mcp_stack(figures, function_id):
    # Given a function and the packages its cold import loaded
    function = functions_of_template()[function_id]
    loaded = set(figures["functions"]["functions"][function_id]["packages"])
    # Then it loads the MCP SDK, starlette and uvicorn exactly when it serves MCP
    if serves_mcp(function):
        assert MCP_STACK & loaded
    else:
        assert not MCP_STACK & loaded, f"{function_id} loads {sorted(MCP_STACK & loaded)}"


@pytest.mark.parametrize("function_id", sorted(functions_of_template()))
def test_a_function_that_imports_the_mcp_stack_has_the_mcp_layer(figures, function_id):
    # Given a function's measured cold import and the layers the template gives it
    entry = figures["functions"]["functions"][function_id]
    names = {
        ref: layer["Properties"]["LayerName"]["Fn::Sub"].removeprefix("${AWS::StackName}-")
        for ref, layer in load_template().resources("AWS::Lambda::LayerVersion").items()
    }
    # (as the template's defaults resolve them: a conditional layer is listed while its condition holds)
    layers = resolve(functions_of_template()[function_id]["Properties"].get("Layers", []))
    refs = [str(layer).removeprefix("ref:") for layer in layers if str(layer).startswith("ref:")]
    # Then the bench recorded the stack's layers the template gives it, in order
    assert entry["layers"] == [names[ref] for ref in refs if ref in names]
    # and the MCP layer is there whenever it imports the MCP stack
    assert entry["imports_mcp"] == bool(MCP_STACK & set(entry["packages"]))
    if entry["imports_mcp"]:
        assert "McpLayer" in entry["layers"], f"{function_id} imports the MCP stack without the MCP layer"
    # and no function pays for a tracing SDK at import
    assert "aws_xray_sdk" not in entry["packages"]


def test_the_endpoint_is_measured_against_the_stock_app_in_both_phases(figures):
    endpoint = figures["endpoint"]
    for request in ("tools/list", "tools/call"):
        for server in ("ours", "stock"):
            phases = endpoint[request][server]
            assert [phase["connections"] for phase in phases] == [1, 8]
            assert all({"rps", "p50_ms", "p99_ms", "requests"} <= set(phase) for phase in phases)


def test_layer_size_is_the_sum_of_the_listed_layers_files(tmp_path):
    # Given a build folder with two layers of known file sizes (one nested) and a third layer not listed
    (tmp_path / "CoreLayer" / "python" / "pkg").mkdir(parents=True)
    (tmp_path / "CoreLayer" / "python" / "pkg" / "module.py").write_bytes(b"x" * 1000)
    (tmp_path / "CoreLayer" / "python" / "top.py").write_bytes(b"y" * 24)
    (tmp_path / "ExtensionLayer" / "extensions").mkdir(parents=True)
    (tmp_path / "ExtensionLayer" / "extensions" / "launcher").write_bytes(b"z" * 300)
    (tmp_path / "OtherLayer").mkdir()
    (tmp_path / "OtherLayer" / "big").write_bytes(b"w" * 5000)

    # When the listed layers are measured
    measured = layers_unzipped_bytes(tmp_path, ["CoreLayer", "ExtensionLayer"])

    # Then every file of theirs counts, at its size, and nothing of the unlisted layer or the folders themselves
    assert measured == 1000 + 24 + 300
