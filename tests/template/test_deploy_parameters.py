"""`make deploy-built` (what CI runs) checks before anything is created: a stack name that is not
stack-exclusive is refused naming the rule, the stack's permissions boundary is created when it is missing (or
the deploy refused, naming the rule), and the boundary joins samconfig's overrides, which
`sam deploy --parameter-overrides` would otherwise replace."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import boto3
import pytest

from devstack.stack.template import ROOT, load_template
from tests.template.test_invariants import EXPANDED, scope

_SPEC = importlib.util.spec_from_file_location("deploy_parameters", ROOT / "deploy" / "deploy_parameters.py")
assert _SPEC and _SPEC.loader
deploy_parameters = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(deploy_parameters)
ACCOUNT_BOUNDARY = "arn:aws:iam::123456789012:policy/boundaries/mcp-backend-dev-permissions-boundary"


class Stacks:
    """A CloudFormation client whose ListStacks answers the given stack names (one page)."""

    def __init__(self, *names: str) -> None:
        self.names = names

    def get_paginator(self, operation: str):
        assert operation == "list_stacks"
        names = self.names

        class Pages:
            def paginate(self, StackStatusFilter):
                assert "DELETE_COMPLETE" not in StackStatusFilter
                return [{"StackSummaries": [{"StackName": name} for name in names]}]

        return Pages()


@pytest.mark.parametrize(
    ("stack", "others"),
    [
        ("mcp", ["mcp-prod"]),  # mcp-* matches every mcp-prod-* name
        ("mcp-prod", ["mcp"]),
        ("mcp-backend-dev", ["other", "mcp-backend-dev-x"]),
    ],
)
def test_a_stack_name_that_is_a_hyphen_prefix_of_another_or_prefixed_by_one_is_refused(stack, others):
    # Given an account whose stacks include one that a `<stack>-*` pattern would confuse with this one
    # When the deploy checks the name
    with pytest.raises(deploy_parameters.Refused) as refused:
        deploy_parameters.check_stack_name(stack, Stacks(stack, *others))
    # Then it refuses, naming the rule and the other stack
    assert "StackNameExclusive" in str(refused.value) and [o for o in others if o in str(refused.value)]


@pytest.mark.parametrize("others", [[], ["mcpx", "prod-mcp", "boundary-mcp", "deploy-role-mcp"], ["mcp"]])
def test_a_stack_name_no_other_stack_extends_passes(others):
    deploy_parameters.check_stack_name("mcp", Stacks(*others))


@pytest.mark.parametrize("stack", ["Mcp", "a" * 25, "1mcp", "mcp_backend"])
def test_a_stack_name_cloudformation_would_truncate_or_s3_refuse_is_refused(stack):
    with pytest.raises(deploy_parameters.Refused, match="StackNameShape"):
        deploy_parameters.check_stack_name(stack, Stacks())


def test_a_missing_boundary_is_created_before_the_stack_and_its_arn_joins_the_overrides(aws, monkeypatch):
    # Given an account without the stack's boundary (with a dataset bucket: moto's CloudFormation leaves the
    # AWS::NoValue of the statement list in place, which CloudFormation removes)
    monkeypatch.setattr(deploy_parameters, "dataset_bucket", lambda environment: "datasets")
    session = boto3.Session(region_name="us-east-1")

    # When the deploy's preflight runs
    overrides = deploy_parameters.preflight("default", session)

    # Then the boundary policy exists (its own stack, from deploy/permissions-boundary.yaml), and the deploy
    # passes its ARN with the environment's other overrides
    policy = session.client("iam").get_policy(PolicyArn=ACCOUNT_BOUNDARY)["Policy"]
    assert policy["Path"] == "/boundaries/"
    assert session.client("cloudformation").describe_stacks(StackName="boundary-mcp-backend-dev")["Stacks"]
    pairs = dict(item.split("=", 1) for item in overrides.split())
    assert pairs["PermissionsBoundaryArn"] == ACCOUNT_BOUNDARY and pairs["EnvironmentName"] == "dev"


def test_an_existing_boundary_is_used_as_it_is(aws):
    iam = boto3.client("iam")
    document = {"Version": "2012-10-17", "Statement": [{"Effect": "Deny", "Action": "iam:*", "Resource": "*"}]}
    iam.create_policy(
        PolicyName="mcp-backend-dev-permissions-boundary", Path="/boundaries/", PolicyDocument=json.dumps(document)
    )
    session = boto3.Session(region_name="us-east-1")
    assert deploy_parameters.ensure_boundary("default", session) == ACCOUNT_BOUNDARY
    assert not session.client("cloudformation").describe_stacks()["Stacks"]


def test_a_boundary_that_cannot_be_created_refuses_the_deploy_naming_the_rule(aws, monkeypatch, capsys):
    # Given a boundary stack that cannot be created (as for the CI deploy role, which may not)
    monkeypatch.setattr(deploy_parameters, "BOUNDARY_TEMPLATE", ROOT / "no-such-template.yaml")
    # When the deploy runs its preflight
    status = deploy_parameters.main(["preflight", "default"])
    # Then it stops before anything is created, naming the rule
    error = capsys.readouterr().err
    assert status == 2 and "PermissionsBoundaryRequired" in error and "nothing was deployed" in error
    assert "Traceback" not in error


def test_the_template_refuses_a_deploy_without_a_boundary_naming_the_rule():
    # When CloudFormation evaluates the rules with PermissionsBoundaryArn empty (the local stack evaluates none)
    failures = scope(PermissionsBoundaryArn="").rule_failures(EXPANDED["Rules"])
    # Then it refuses the stack before any resource, naming the rule
    assert [f for f in failures if f.startswith("PermissionsBoundaryRequired:")]
    passing = scope(PermissionsBoundaryArn=ACCOUNT_BOUNDARY).rule_failures(EXPANDED["Rules"])
    assert not [f for f in passing if "PermissionsBoundaryRequired" in f]


def test_the_boundary_joins_the_environments_overrides_instead_of_replacing_them():
    overrides = deploy_parameters.overrides("prod", ["PermissionsBoundaryArn=arn:aws:iam::1:policy/b"])
    pairs = dict(item.split("=", 1) for item in overrides.split())
    assert pairs["EnvironmentName"] == "prod" and pairs["DeploymentType"] == "Canary10Percent5Minutes"
    assert pairs["WorkerTimeout"] == "120" and pairs["PermissionsBoundaryArn"] == "arn:aws:iam::1:policy/b"


def test_the_makefile_runs_the_preflight_before_sam_deploy_and_stops_on_its_refusal():
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile.split("\ndeploy-built:")[1].split("\n\n")[0]
    assert recipe.index("preflight $(ENV)) || exit 2") < recipe.index("$(SAM) deploy --config-env")


def test_every_environment_deploys_a_stack_name_the_preflight_accepts():
    # Given every samconfig.toml environment (the profiles minimal and full among them), all in one account
    environments = ("default", "prod", "minimal", "full")
    names = [deploy_parameters.stack_name(environment) for environment in environments]
    # Then each stack name passes the preflight beside the others
    for name in names:
        others = [other for other in names if other != name]
        deploy_parameters.check_stack_name(name, Stacks(*others))


def test_make_delete_lists_every_store_the_stack_keeps_with_its_removal():
    # Given every resource the template keeps when the stack is deleted (SAM's function versions go with
    # their function, so they keep nothing)
    template = load_template().expanded
    kept = {
        logical_id
        for logical_id, resource in template["Resources"].items()
        if resource.get("DeletionPolicy") == "Retain" and resource["Type"] != "AWS::Lambda::Version"
    }
    assert kept == {"JobTable", "MonitorTable", "ApiKeysSecret", "EndpointTokenKey", "AuthorizationTable"}
    # Then `make delete` reads each one's name from an output and prints how to remove it
    recipe = (ROOT / "Makefile").read_text().split("\ndelete:")[1].split("\n\n")[0]
    for logical_id in kept:
        [output] = [name for name, o in template["Outputs"].items() if o["Value"] == {"Ref": logical_id}]
        assert f"value {output}" in recipe, logical_id
    assert "delete-table" in recipe and "delete-secret" in recipe and "schedule-key-deletion" in recipe
    assert "$(SAM) delete" in recipe


def test_make_delete_reads_an_output_a_profile_leaves_out_as_none():
    # Given the output lookup of `make delete`, and a minimal stack's outputs (no MonitorTableName: probes are off)
    recipe = (ROOT / "Makefile").read_text().split("\ndelete:")[1].split("\n\n")[0]
    lookup = recipe.split("-c '")[1].split('\' "$$1"')[0]
    outputs = json.dumps([{"OutputKey": "JobTableName", "OutputValue": "jobs"}])

    # When it looks up a present and an absent output
    def value(name: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", lookup, name], input=outputs, capture_output=True, text=True, check=False
        )

    # Then the present one is its value and the absent one says none, without a traceback
    assert value("JobTableName").stdout.strip() == "jobs"
    absent = value("MonitorTableName")
    assert (absent.returncode, absent.stderr) == (0, "")
    assert absent.stdout.strip() == "(none: its part is off)"
