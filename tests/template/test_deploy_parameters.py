"""`make deploy-built` with PERMISSIONS_BOUNDARY_ARN (what CI runs): a boundary ARN that names no policy stops the
deploy before anything is created, naming the parameter; a real one is added to samconfig's overrides, which
`sam deploy --parameter-overrides` would otherwise replace."""

from __future__ import annotations

import importlib.util
import json

import boto3

from devstack.stack.template import ROOT, load_template

_SPEC = importlib.util.spec_from_file_location("deploy_parameters", ROOT / "deploy" / "deploy_parameters.py")
assert _SPEC and _SPEC.loader
deploy_parameters = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(deploy_parameters)


def test_a_boundary_that_names_no_policy_stops_the_deploy_naming_the_parameter(aws, capsys):
    # Given an account without the boundary policy
    missing = "arn:aws:iam::123456789012:policy/boundaries/mcp-backend-dev-permissions-boundary"

    # When the deploy checks it
    status = deploy_parameters.check_boundary(missing)

    # Then it stops, and says which parameter and why
    assert status == 2
    error = capsys.readouterr().err
    assert "PermissionsBoundaryArn" in error and missing in error and "nothing was deployed" in error


def test_an_existing_boundary_passes(aws):
    iam = boto3.client("iam")
    document = {"Version": "2012-10-17", "Statement": [{"Effect": "Deny", "Action": "iam:*", "Resource": "*"}]}
    arn = iam.create_policy(
        PolicyName="mcp-backend-dev-permissions-boundary", Path="/boundaries/", PolicyDocument=json.dumps(document)
    )["Policy"]["Arn"]
    assert deploy_parameters.check_boundary(arn) == 0


def test_the_boundary_joins_the_environments_overrides_instead_of_replacing_them():
    overrides = deploy_parameters.overrides("prod", ["PermissionsBoundaryArn=arn:aws:iam::1:policy/b"])
    pairs = dict(item.split("=", 1) for item in overrides.split())
    assert pairs["EnvironmentName"] == "prod" and pairs["DeploymentType"] == "Canary10Percent5Minutes"
    assert pairs["WorkerTimeout"] == "120" and pairs["PermissionsBoundaryArn"] == "arn:aws:iam::1:policy/b"


def test_the_makefile_checks_the_boundary_before_sam_deploy():
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile.split("\ndeploy-built:")[1].split("\n\n")[0]
    assert recipe.index("check-boundary") < recipe.index("$(SAM) deploy")


def test_make_delete_lists_every_store_the_stack_keeps_with_its_removal():
    # Given every resource the template keeps when the stack is deleted (SAM's function versions go with
    # their function, so they keep nothing)
    template = load_template().expanded
    kept = {
        logical_id
        for logical_id, resource in template["Resources"].items()
        if resource.get("DeletionPolicy") == "Retain" and resource["Type"] != "AWS::Lambda::Version"
    }
    assert kept == {"JobTable", "MonitorTable", "ApiKeysSecret", "EndpointTokenKey"}
    # Then `make delete` reads each one's name from an output and prints how to remove it
    recipe = (ROOT / "Makefile").read_text().split("\ndelete:")[1].split("\n\n")[0]
    for logical_id in kept:
        [output] = [name for name, o in template["Outputs"].items() if o["Value"] == {"Ref": logical_id}]
        assert f"value {output}" in recipe, logical_id
    assert "delete-table" in recipe and "delete-secret" in recipe and "schedule-key-deletion" in recipe
    assert "$(SAM) delete" in recipe


def test_a_deploy_without_a_boundary_keeps_the_one_the_stack_has(aws):
    # Given a deployed dev stack whose roles carry a boundary (its PermissionsBoundaryArn parameter)
    arn = "arn:aws:iam::123456789012:policy/boundaries/mcp-backend-dev-permissions-boundary"
    cloudformation = boto3.client("cloudformation", region_name="us-east-1")
    template = {
        "Parameters": {"PermissionsBoundaryArn": {"Type": "String", "Default": ""}},
        "Resources": {"Queue": {"Type": "AWS::SQS::Queue"}},
    }
    cloudformation.create_stack(
        StackName="mcp-backend-dev",
        TemplateBody=json.dumps(template),
        Parameters=[{"ParameterKey": "PermissionsBoundaryArn", "ParameterValue": arn}],
    )
    # When a terminal deploy names no boundary, it deploys with the stack's; a given one wins
    assert deploy_parameters.boundary("default", "", cloudformation) == arn
    assert deploy_parameters.boundary("default", "arn:other", cloudformation) == "arn:other"


def test_a_first_deploy_has_no_boundary_to_keep(aws):
    cloudformation = boto3.client("cloudformation", region_name="us-east-1")
    assert deploy_parameters.boundary("default", "", cloudformation) == ""
