"""The template's tracing configuration (docs/operations.md, "Traces"): off by default; with Tracing=xray|otlp the
traced functions read the mode, the three without McpLayer take the OpenTelemetry SDK from TracingSdkLayerArn (a
deploy without it is refused), and with xray their roles, and the boundary, allow xray:PutSpans and nothing more."""

from __future__ import annotations

import re
from typing import Any

import pytest
from samtranslator.yaml_helper import yaml_parse

from devstack.stack.template import ROOT
from tests.template.test_invariants import EXPANDED, RESOURCES, TEMPLATE, of_type, referenced_resource, scope

TRACED_FUNCTIONS = {"McpServer", "ToolWorker", "DurableToolWorker", "ProbeDispatcher", "ProbeWorker", "ProbeRecorder"}
SDK_LAYER = "arn:aws:lambda:us-east-1:901920570463:layer:aws-otel-python-arm64-ver-1-32-0:1"
MODES = ["off", "xray", "otlp"]


def parameters(mode: str) -> dict[str, Any]:
    return {"Tracing": mode, "TracingSdkLayerArn": SDK_LAYER if mode != "off" else ""}


def layers_of(function_id: str, mode: str) -> list[str]:
    """The layers a function lists for the mode, resolved (the stack's own as ref:<id>, published ones as ARNs)."""
    return scope(**parameters(mode)).resolve(RESOURCES[function_id]["Properties"]["Layers"])


def test_tracing_is_off_by_default_and_only_the_traced_functions_read_the_mode():
    # Given the template's defaults
    defaults = TEMPLATE.parameter_defaults()
    assert (defaults["Tracing"], defaults["TracingSdkLayerArn"]) == ("off", "")

    # When each function's environment is resolved with tracing on
    reading = {
        logical_id
        for logical_id, function in of_type("AWS::Lambda::Function").items()
        if scope(**parameters("xray")).resolve(function["Properties"]["Environment"]["Variables"]).get("TRACING_MODE")
        == "xray"
    }

    # Then exactly the traced functions read it (the others never trace)
    assert reading == TRACED_FUNCTIONS


@pytest.mark.parametrize("mode", MODES)
def test_the_sdk_layer_is_attached_with_tracing_on_to_the_functions_without_mcp_layer_only(mode):
    # Given the Tracing mode
    # When every function's layers are resolved
    with_sdk = {
        logical_id for logical_id in of_type("AWS::Lambda::Function") if SDK_LAYER in layers_of(logical_id, mode)
    }
    with_mcp_layer = {
        logical_id
        for logical_id in of_type("AWS::Lambda::Function")
        if any(str(layer).startswith("ref:McpLayer") for layer in layers_of(logical_id, mode))
    }

    # Then with tracing on, every traced function has the SDK (its own layer, or McpLayer), and none carries more
    # than Lambda's five layers; with it off, no function has the SDK layer
    expected = TRACED_FUNCTIONS - with_mcp_layer if mode != "off" else set()
    assert with_sdk == expected
    assert TRACED_FUNCTIONS <= with_sdk | with_mcp_layer or mode == "off"
    for logical_id in of_type("AWS::Lambda::Function"):
        assert len(layers_of(logical_id, mode)) <= 5, logical_id


def test_the_mcp_layer_ships_the_sdk_and_the_core_layer_does_not():
    # Given the layers' pinned requirements (exported from uv.lock)
    mcp_layer = (ROOT / "layers" / "mcp" / "requirements.txt").read_text()
    core_layer = (ROOT / "layers" / "shared" / "requirements.txt").read_text()

    # Then the SDK is in McpLayer (McpServer and ProbeWorker) and not in the core layer (ToolWorker's 15 MB)
    assert re.search(r"^opentelemetry-sdk==", mcp_layer, re.M)
    assert not re.search(r"^opentelemetry", core_layer, re.M)
    assert not re.search(r"^(protobuf|opentelemetry-exporter)", mcp_layer, re.M)  # the exporter is JSON


@pytest.mark.parametrize("mode", MODES)
def test_a_deploy_with_tracing_on_and_no_sdk_layer_is_refused(mode):
    # Given the template's rules, with tracing in `mode` and no SDK layer, then with one
    rules = EXPANDED["Rules"]
    without = scope(Tracing=mode, TracingSdkLayerArn="").rule_failures(rules)
    with_layer = scope(Tracing=mode, TracingSdkLayerArn=SDK_LAYER).rule_failures(rules)

    # Then only tracing on without the layer is refused, with the rule's reason
    refused = [failure for failure in without if failure.startswith("TracingNeedsAnSdkLayer")]
    assert bool(refused) is (mode != "off")
    assert not [failure for failure in with_layer if failure.startswith("TracingNeedsAnSdkLayer")]


@pytest.mark.parametrize("mode", MODES)
def test_with_xray_the_traced_roles_and_the_boundary_allow_put_spans_and_nothing_more(mode):
    # Given the span-export policy
    policy = RESOURCES["TracingSpanExport"]
    [statement] = policy["Properties"]["PolicyDocument"]["Statement"]
    holders = {referenced_resource(role) for role in policy["Properties"]["Roles"]}

    # Then it exists only with Tracing=xray, allows xray:PutSpans only (no resource type: "*"), inline in exactly the
    # traced functions' roles
    assert scope(**parameters(mode)).condition(policy["Condition"]) is (mode == "xray")
    assert (statement["Effect"], statement["Action"], statement["Resource"]) == ("Allow", "xray:PutSpans", "*")
    for logical_id, function in of_type("AWS::Lambda::Function").items():
        role = referenced_resource(function["Properties"]["Role"])
        assert (role in holders) is (logical_id in TRACED_FUNCTIONS), logical_id

    # And the permissions boundary every role carries allows it
    boundary = yaml_parse((ROOT / "deploy" / "permissions-boundary.yaml").read_text())
    document = next(iter(boundary["Resources"].values()))["Properties"]["PolicyDocument"]
    allowed = {action for s in document["Statement"] if s.get("Effect") == "Allow" for action in _actions(s)}
    assert "xray:PutSpans" in allowed


def _actions(statement: dict[str, Any]) -> list[str]:
    action = statement.get("Action", [])
    return action if isinstance(action, list) else [action]


@pytest.mark.parametrize(
    ("endpoint", "accepted"),
    [
        ("http://localhost:4318/v1/traces", True),
        ("https://otlp.example.com/v1/traces", True),
        ("https://otlp.example.com/v1/traces?api_key=secret", False),
        ("https://otlp.example.com/v1/traces#x", False),
        ("ftp://otlp.example.com/", False),
    ],
)
def test_the_otlp_endpoint_parameter_refuses_a_query_string(endpoint, accepted):
    # Given the parameter's pattern: a credential never goes in a URL (spans carry no query string either)
    pattern = TEMPLATE.source["Parameters"]["TracingOtlpEndpoint"]["AllowedPattern"]
    assert bool(re.fullmatch(pattern, endpoint)) is accepted
