"""What `sam build` produced (make test builds before it tests): the core and MCP layers for python3.13
on arm64, neither shipping boto3/botocore, the core one without the MCP stack, and one-file function artifacts."""

from __future__ import annotations

from pathlib import Path

import pytest

from devstack.template import load_template

BUILD = Path(__file__).resolve().parents[2] / ".aws-sam" / "build"

pytestmark = pytest.mark.skipif(not BUILD.exists(), reason="run `make build` (make test does) to check artifacts")


LAYERS = ("SharedLayer", "McpLayer")


def layer_dir(layer: str = "SharedLayer") -> Path:
    return BUILD / layer / "python"


def test_layer_has_the_shared_package_and_pinned_dependencies():
    names = {p.name for p in layer_dir().iterdir()}
    assert {"mcp_backend", "aws_lambda_powertools", "pydantic", "pydantic_core", "httpx"} <= names


def test_the_mcp_stack_is_in_the_mcp_layer_only():
    core, mcp = ({p.name for p in layer_dir(layer).iterdir()} for layer in LAYERS)
    stack = {"mcp", "starlette", "uvicorn", "sse_starlette", "jwt", "cryptography"}
    assert stack <= mcp
    assert not (stack | {"aws_xray_sdk", "wrapt"}) & core


@pytest.mark.parametrize("layer", LAYERS)
def test_layer_ships_no_sdk_the_runtime_provides(layer):
    names = {p.name for p in layer_dir(layer).iterdir()}
    assert not {"boto3", "botocore", "s3transfer"} & names


@pytest.mark.parametrize("layer", LAYERS)
def test_compiled_wheels_target_cpython313_on_arm64(layer):
    extensions = list(layer_dir(layer).rglob("*.so"))
    assert extensions, "expected compiled extensions (pydantic_core, cryptography)"
    assert all("cpython-313-aarch64-linux-gnu" in p.name or "abi3" in p.name for p in extensions), extensions


@pytest.mark.parametrize("function_id", sorted(load_template().resources("AWS::Lambda::Function")))
def test_function_artifact_is_just_its_handler(function_id):
    if not (BUILD / function_id).exists():
        pytest.skip(f"{function_id} is not in this build; run `make build` (make test does)")
    handler = load_template().resource(function_id)["Properties"]["Handler"]
    # app.handler -> app.py; a web-adapter function's handler is its start script (run.sh).
    entry = handler if handler.endswith(".sh") else handler.rsplit(".", 1)[0] + ".py"
    assert sorted(p.name for p in (BUILD / function_id).iterdir()) == [entry]
