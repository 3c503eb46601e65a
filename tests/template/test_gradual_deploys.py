"""Deploys roll out gradually and stay bounded: McpServer and ToolWorker are reached only through their alias
"live", which CodeDeploy moves as DeploymentType says and moves back when a deployment alarm fires; every role
of the expanded template carries the PermissionsBoundaryArn; bad parameter values are refused before anything
is created."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from tests.template.test_invariants import EXPANDED, RESOURCES, of_type, referenced_resource, resolve

ALIASES = of_type("AWS::Lambda::Alias")
# The aliases CodeDeploy moves (an UpdatePolicy with a deployment group). The durable worker's alias is not one:
# ToolWorker names it in code, not a trigger, and an execution stays on the version it started on
# (tests/template/test_durable_worker.py).
ALIASED = {
    referenced_resource(alias["Properties"]["FunctionName"]): alias_id
    for alias_id, alias in ALIASES.items()
    if "UpdatePolicy" in alias
}
# Where each trigger type names the function it invokes.
TRIGGER_TARGETS = {
    "AWS::Lambda::EventSourceMapping": lambda p: [p["FunctionName"]],
    "AWS::Lambda::Url": lambda p: [p["TargetFunctionArn"]],
    "AWS::Lambda::Permission": lambda p: [p["FunctionName"]],
    "AWS::Lambda::EventInvokeConfig": lambda p: [p["FunctionName"]],
    "AWS::Events::Rule": lambda p: [t["Arn"] for t in p.get("Targets", [])],
    "AWS::SNS::Subscription": lambda p: [p["Endpoint"]] if p.get("Protocol") == "lambda" else [],
}
BOUNDARY = "arn:aws:iam::123456789012:policy/boundaries/mcp-backend-dev-permissions-boundary"


def triggers() -> list[tuple[str, Any]]:
    return [
        (logical_id, target)
        for logical_id, resource in RESOURCES.items()
        if resource["Type"] in TRIGGER_TARGETS
        for target in TRIGGER_TARGETS[resource["Type"]](resource["Properties"])
    ]


def named_function(target: Any) -> str | None:
    """The logical id a trigger's target expression references (a function, alias or version), if any."""
    if isinstance(target, dict) and ("Ref" in target or "Fn::GetAtt" in target):
        return referenced_resource(target)
    return None


def test_mcp_server_and_tool_worker_publish_an_alias_with_a_deployment_group():
    assert set(ALIASED) == {"McpServer", "ToolWorker"}
    assert all(ALIASES[alias]["Properties"]["Name"] == "live" for alias in ALIASED.values())


@pytest.mark.parametrize("function_id", sorted(ALIASED))
def test_every_trigger_of_an_aliased_function_goes_through_its_alias(function_id):
    # Given every resource that invokes something: mappings, URLs, permissions, rules, subscriptions
    through_alias = [lid for lid, target in triggers() if named_function(target) == ALIASED[function_id]]
    direct = [lid for lid, target in triggers() if named_function(target) == function_id]
    # Then none names the function itself (that would run $LATEST, outside the rollout), and some name the alias
    assert direct == [], f"{function_id} is invoked around its alias by {direct}"
    assert through_alias, function_id


def test_the_alias_check_fails_for_a_trigger_on_the_function():
    # The rule above, shown able to fail: a mapping whose FunctionName is the function itself.
    assert named_function({"Ref": "ToolWorker"}) == "ToolWorker" != ALIASED["ToolWorker"]


@pytest.mark.parametrize("function_id", sorted(ALIASED))
def test_each_alias_update_is_a_codedeploy_deployment_that_rolls_back_on_its_alarms(function_id):
    alias = ALIASES[ALIASED[function_id]]
    group_id = referenced_resource(alias["UpdatePolicy"]["CodeDeployLambdaAliasUpdate"]["DeploymentGroupName"])
    group = RESOURCES[group_id]["Properties"]
    # The configuration the DeploymentType parameter names (SAM resolves it: here its default, the canary)
    assert resolve(group["DeploymentConfigName"]) == "CodeDeployDefault.LambdaCanary10Percent5Minutes"
    assert "DEPLOYMENT_STOP_ON_ALARM" in group["AutoRollbackConfiguration"]["Events"]
    assert group["AutoRollbackConfiguration"]["Enabled"] is True
    # Its own role (bounded like every other), not SAM's default with AWSCodeDeployRoleForLambda on "*"
    assert referenced_resource(group["ServiceRoleArn"]) == "GradualDeploymentRole"
    alarms = [RESOURCES[referenced_resource(a["Name"])]["Properties"] for a in group["AlarmConfiguration"]["Alarms"]]
    metric_names = set()
    for alarm in alarms:
        metrics = [alarm] + [q["MetricStat"]["Metric"] for q in alarm.get("Metrics", []) if "MetricStat" in q]
        for metric in (m for m in metrics if "MetricName" in m):
            metric_names.add(metric["MetricName"])
            # read through the alias, per minute, so a five-minute canary is watched
            dimensions = {d["Name"]: resolve(d["Value"]) for d in metric["Dimensions"]}
            assert dimensions == {"FunctionName": f"ref:{function_id}", "Resource": f"ref:{function_id}:live"}
        queries = [q for q in alarm.get("Metrics", []) if "MetricStat" in q]
        periods = [alarm.get("Period")] + [q["MetricStat"]["Period"] for q in queries]
        assert max(p for p in periods if p) == 60
    assert metric_names == {"Errors", "Duration"}


def test_deployment_type_defaults_to_the_canary_and_samconfig_chooses_per_environment():
    spec = EXPANDED["Parameters"]["DeploymentType"]
    assert spec["Default"] == "Canary10Percent5Minutes" and "AllAtOnce" in spec["AllowedValues"]
    samconfig = open("samconfig.toml").read()
    dev = samconfig.split("[default.deploy.parameters]")[1].split("\n[")[0]
    prod = samconfig.split("[prod.deploy.parameters]")[1].split("\n[")[0]
    assert "DeploymentType=AllAtOnce" in dev and "DeploymentType=Canary10Percent5Minutes" in prod


ROLES = of_type("AWS::IAM::Role")


@pytest.mark.parametrize("role_id", sorted(ROLES))
def test_every_role_of_the_expanded_template_carries_the_permissions_boundary(role_id):
    # Given the PermissionsBoundaryArn a deploy passes, and the empty default of the local stack
    boundary = ROLES[role_id]["Properties"].get("PermissionsBoundary")
    # Then each role created by the stack (SAM's function roles and the explicit ones) carries it, or none
    assert resolve(boundary, PermissionsBoundaryArn=BOUNDARY) == BOUNDARY, role_id
    assert not isinstance(resolve(boundary, PermissionsBoundaryArn=""), str), role_id  # AWS::NoValue
    # And lives under the stack's own path, the one the deploy role's role grants name
    assert resolve(ROLES[role_id]["Properties"].get("Path")) == "/invariants/", role_id


def test_the_template_has_sam_and_explicit_roles_to_check():
    assert {"McpServerRole", "ToolWorkerRole", "GradualDeploymentRole"} <= set(ROLES)


def refused(parameter: str, value: str) -> str | None:
    """CloudFormation's parameter check, before any resource: AllowedValues, then AllowedPattern."""
    spec = EXPANDED["Parameters"][parameter]
    if "AllowedValues" in spec and value not in spec["AllowedValues"]:
        return f"Parameter '{parameter}' must be one of AllowedValues"
    if "AllowedPattern" in spec and not re.fullmatch(spec["AllowedPattern"], value):
        return f"Parameter '{parameter}' failed to satisfy constraint: {spec.get('ConstraintDescription', '')}"
    return None


@pytest.mark.parametrize(
    ("parameter", "value"),
    [
        ("DeploymentType", "Canary50Percent"),
        ("DeploymentType", "canary10percent5minutes"),
        ("PermissionsBoundaryArn", "my-boundary"),
        ("PermissionsBoundaryArn", "arn:aws:iam::123456789012:role/not-a-policy"),
        ("PermissionsBoundaryArn", "arn:aws:iam::aws:policy/AdministratorAccess"),
    ],
)
def test_a_bad_value_is_refused_before_anything_is_created_naming_the_parameter(parameter, value):
    message = refused(parameter, value)
    assert message is not None and parameter in message


@pytest.mark.parametrize(
    ("parameter", "value"),
    [("DeploymentType", "AllAtOnce"), ("PermissionsBoundaryArn", ""), ("PermissionsBoundaryArn", BOUNDARY)],
)
def test_good_values_pass(parameter, value):
    assert refused(parameter, value) is None


def test_the_parameters_are_in_the_console_groups():
    groups = json.dumps(EXPANDED.get("Metadata", {}))
    assert "PermissionsBoundaryArn" in groups and "DeploymentType" in groups


def test_codedeploy_moves_only_the_two_aliases_and_reads_only_their_deployment_alarms():
    # Given the role CodeDeploy acts with
    [policy] = RESOURCES["GradualDeploymentRole"]["Properties"]["Policies"]
    statements = {s["Sid"]: s for s in policy["PolicyDocument"]["Statement"]}
    # Then it may get and update the aliases of McpServer and ToolWorker, and describe their four alarms: nothing else
    assert set(statements) == {"ShiftAliasLive", "ReadDeploymentAlarms"}
    aliases = statements["ShiftAliasLive"]
    assert set(aliases["Action"]) == {"lambda:GetAlias", "lambda:UpdateAlias", "lambda:GetProvisionedConcurrencyConfig"}
    # (ToolWorker's entries are Fn::If: they exist with the job pipeline only)
    written = [r["Fn::If"][1] if "Fn::If" in r else r for r in aliases["Resource"]]
    named = {r["Fn::Sub"].split("${")[1].split(".")[0] if "Fn::Sub" in r else referenced_resource(r) for r in written}
    assert named == {"McpServer", "ToolWorker"}
    alarms = statements["ReadDeploymentAlarms"]
    assert alarms["Action"] == "cloudwatch:DescribeAlarms"
    assert {referenced_resource(r) for r in alarms["Resource"]} == {
        f"{function}Deployment{kind}Alarm"
        for function in ("McpServer", "ToolWorker")
        for kind in ("Errors", "Duration")
    }
