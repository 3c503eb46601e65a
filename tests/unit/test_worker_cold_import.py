"""What a function's cold start pays for: importing its handler module loads no AWS SDK. Powertools' idempotency
package re-exports its DynamoDB persistence layer, which imports boto3 (most of a worker's import); the shared
package defers that `__init__` (mcp_backend.idempotency), so the SDK loads with the first record that needs a client.
McpServer's app module is held to the same in tests/unit/test_mcp_server_cold_import.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import boto3
import pytest

from devstack.runtime.in_process import function_environment
from devstack.stack.resources import FunctionSpec, LocalStack
from devstack.stack.template import ROOT, load_template

# What importing boto3 (or creating a client) leaves in sys.modules; botocore's small package __init__ alone, which
# Powertools' user-agent hook imports, is not the SDK's cost.
SDK_MODULES = ("boto3", "botocore.session", "botocore.client", "s3transfer")
# A command-line parser: the shared package's commands (`python -m mcp_backend.api_keys`, ...) are an operator's.
COMMAND_LINE_MODULES = ("argparse",)
PROBE = (
    "import importlib, json, sys\n"
    "importlib.import_module(sys.argv[1])\n"
    # A module registered to load on first use (mcp_backend.lazy_imports) is in sys.modules unexecuted: not loaded.
    "executed = {n for n, m in sys.modules.items() if type(m).__name__ != '_LazyModule'}\n"
    f"print(json.dumps([name for name in {SDK_MODULES + COMMAND_LINE_MODULES!r} if name in executed]))\n"
)
# DurableToolWorker's handler is the durable execution SDK's wrapper, whose Lambda client module imports boto3 at
# import: every invocation of a durable function checkpoints through that client, so the SDK is the first
# invocation's need in any case. Held to it: once the SDK stops loading boto3 at import, this exception goes.
LOADS_SDK_AT_IMPORT = {"DurableToolWorker"}
FUNCTIONS = sorted(
    logical_id
    for logical_id, function in load_template().resources("AWS::Lambda::Function").items()
    if function["Properties"]["Handler"].endswith(".handler")
)


def cold_import(spec: FunctionSpec, region: str) -> list[str]:
    """The SDK modules loaded once the function's handler module is imported in a fresh interpreter, with its code
    and its layers on the path and its template environment (as Lambda's init does)."""
    with function_environment(spec, region):
        variables = {name: os.environ[name] for name in spec.environment}
    path = [spec.code_dir, *(layer for layer in spec.layer_dirs if layer.is_dir())]
    environment = {
        **variables,
        "PATH": os.environ["PATH"],
        "PYTHONPATH": os.pathsep.join(str(folder) for folder in path),
        "AWS_REGION": region,
        "AWS_LAMBDA_FUNCTION_NAME": spec.name,
    }
    module = spec.handler.rsplit(".", 1)[0]
    out = subprocess.run(
        [sys.executable, "-c", PROBE, module], env=environment, capture_output=True, text=True, cwd=ROOT, check=False
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.splitlines()[-1])


@pytest.mark.parametrize("function_id", FUNCTIONS)
def test_importing_the_handler_loads_no_aws_sdk_and_no_command_line_parser(aws, function_id):
    # Given the function as the template declares it
    stack = LocalStack(boto3.client)
    spec = stack.create_all().function(function_id)

    # When its handler module is imported in a fresh interpreter
    loaded = cold_import(spec, stack.region)

    # Then neither boto3 nor botocore's session and clients are loaded: the first event that needs one loads them
    # (a durable function's SDK loads them, as LOADS_SDK_AT_IMPORT says); nor a command-line parser: the shared
    # package's commands are run by operators, not functions
    if function_id in LOADS_SDK_AT_IMPORT:
        assert "boto3" in loaded and not set(loaded) & set(COMMAND_LINE_MODULES)
    else:
        assert loaded == []
