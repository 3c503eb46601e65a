"""`make verify-deployed` fails on any access the live stack grants that the template does not: a role trusted
outside the account, a resource policy or Function URL the template does not write, a changed key policy, a role
under the stack's path that the stack does not own. Its comparison is checked here against the expanded template,
with the live side built as AWS returns it (no AWS here)."""

from __future__ import annotations

import copy
import importlib.util
import json
from typing import Any

import boto3
import pytest

from devstack.stack.template import ROOT
from tests.template.test_invariants import EXPANDED

_SPEC = importlib.util.spec_from_file_location("verify_deployed", ROOT / "deploy" / "verify_deployed.py")
assert _SPEC and _SPEC.loader
verify = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(verify)

ACCOUNT = "123456789012"
EXPECTED = verify.expected_policies(EXPANDED)
ROLES = {f"mcp-{logical_id}-A1B2C3": logical_id for logical_id, r in EXPANDED["Resources"].items()
         if r["Type"] == "AWS::IAM::Role"}  # fmt: skip
OWNED = set(EXPANDED["Resources"])


def as_deployed(value: Any) -> Any:
    """A template policy document as AWS returns it: role references and the account root as ARNs."""
    if isinstance(value, dict) and "Fn::GetAtt" in value:
        logical_id = value["Fn::GetAtt"][0]
        return f"arn:aws:iam::{ACCOUNT}:role/mcp/mcp-{logical_id}-A1B2C3"
    if isinstance(value, dict) and "Fn::Sub" in value and str(value["Fn::Sub"]).endswith(":root"):
        return f"arn:aws:iam::{ACCOUNT}:root"
    if isinstance(value, dict):
        return {key: as_deployed(item) for key, item in value.items()}
    if isinstance(value, list):
        return [as_deployed(item) for item in value]
    return value


def live_from_template() -> dict[str, set]:
    """What the live stack reads back when it is exactly the template, reduced by the same code as live policies."""
    live: dict[str, set] = {}
    for logical_id, resource in EXPANDED["Resources"].items():
        props = resource.get("Properties", {})
        if resource["Type"] == "AWS::IAM::Role":
            document = as_deployed(props["AssumeRolePolicyDocument"])
            live[f"trust {logical_id}"] = verify.grants(document, ROLES, ACCOUNT)
        elif resource["Type"] == "AWS::KMS::Key":
            live[f"key {logical_id}"] = verify.grants(as_deployed(props["KeyPolicy"]), ROLES, ACCOUNT)
    for key, found in EXPECTED.items():
        live.setdefault(key, copy.deepcopy(found))
    return live


def test_the_template_expects_service_trust_only_and_public_urls_only_on_the_mcp_alias_and_the_sign_in():
    trusts = {g for key, found in EXPECTED.items() if key.startswith("trust ") for g in found}
    services = {"service:lambda.amazonaws.com", "service:codedeploy.amazonaws.com"}
    assert {principal for _, principal, _ in trusts} == services
    urls = {key: found for key, found in EXPECTED.items() if key.startswith("url ")}
    assert urls == {
        "url McpServerAliaslive": {("Allow", "url", "NONE")},
        "url AuthorizationServer": {("Allow", "url", "NONE")},  # an authorization server is public by definition
        "url McpServerIamAlias": {("Allow", "url", "AWS_IAM")},  # IamCallers=Enabled: SigV4 callers only
    }
    assert ("Allow", "role:ProbeWorkerRole", "kms:decrypt") in EXPECTED["key EndpointTokenKey"]


def test_a_live_stack_that_is_the_template_has_no_difference():
    assert verify.differences(EXPECTED, live_from_template(), OWNED) == []


def trusted_by(principal: dict) -> set:
    document = {"Statement": [{"Effect": "Allow", "Principal": principal, "Action": "sts:AssumeRole"}]}
    return verify.grants(document, ROLES, ACCOUNT)


@pytest.mark.parametrize(
    ("change", "named"),
    [
        # a stack role trusted by another account (standing access to the stack's data)
        (lambda live: live["trust McpServerRole"].update(trusted_by({"AWS": "arn:aws:iam::999999999999:root"})),
         "trust McpServerRole: live only"),
        # a role under the stack's path that CloudFormation does not own
        (lambda live: live.__setitem__("trust outside-the-stack:arn:aws:iam::123456789012:role/mcp/extra",
                                       trusted_by({"Service": "lambda.amazonaws.com"})),
         "trust outside-the-stack"),
        # a public permission on another function, or a URL the template does not make
        (lambda live: live.setdefault("policy ToolWorker", set()).add(
            verify.permission_grant("*", "lambda:InvokeFunction", None)), "policy ToolWorker: live only"),
        (lambda live: live.setdefault("url ToolWorker", set()).add(("Allow", "url", "NONE")), "url ToolWorker"),
        # the key policy widened to the account's administrators
        (lambda live: live["key EndpointTokenKey"].add(("Allow", "account", "kms:creategrant")),
         "key EndpointTokenKey: live only"),
        # the public URL's auth changed, or a statement of the template's removed
        (lambda live: live.__setitem__("url McpServerAliaslive", {("Allow", "url", "AWS_IAM")}),
         "url McpServerAliaslive"),
        (lambda live: live.__setitem__("queue ProbeResultQueue", set()), "queue ProbeResultQueue: template only"),
    ],
)  # fmt: skip
def test_any_access_the_template_does_not_grant_is_a_difference_naming_where(change, named):
    # Given the live stack as the template makes it, then changed outside CloudFormation
    live = live_from_template()
    change(live)
    # When it is compared with the template
    found = verify.differences(EXPECTED, live, OWNED)
    # Then the difference names the policy it is in
    assert found and all(named in line for line in found), found


def test_a_foreign_role_or_account_is_never_reduced_to_the_stacks():
    foreign = {"AWS": ["arn:aws:iam::999999999999:role/mcp/mcp-McpServerRole-A1B2C3", "arn:aws:iam::999999999999:root"]}
    assert {p for _, p, _ in trusted_by(foreign)} == {
        "foreign:AWS:arn:aws:iam::999999999999:role/mcp/mcp-McpServerRole-A1B2C3",
        "foreign:AWS:arn:aws:iam::999999999999:root",
    }


def test_a_resource_the_template_makes_only_under_a_condition_is_not_required():
    # Given a live stack deployed without AlarmEmail: no OpsAlarmKey
    live = live_from_template()
    live.pop("key OpsAlarmKey", None)
    assert verify.differences(EXPECTED, live, OWNED - {"OpsAlarmKey"}) == []


def test_the_makefile_target_runs_the_comparison_with_the_expanded_template():
    recipe = (ROOT / "Makefile").read_text().split("\nverify-deployed:")[1].split("\n\n")[0]
    assert "deploy/verify_deployed.py $(ENV) build/expanded-template.json" in recipe
    assert "make verify-deployed" in (ROOT / ".github" / "workflows" / "deploy.yml").read_text()


# A small stack with each kind of policy verify-deployed reads, deployed on moto as CloudFormation would.
SMALL = {
    "Resources": {
        "FnRole": {
            "Type": "AWS::IAM::Role",
            "Properties": {
                "Path": "/mcp/",
                "AssumeRolePolicyDocument": {
                    "Version": "2012-10-17",
                    "Statement": [
                        {
                            "Effect": "Allow",
                            "Principal": {"Service": ["lambda.amazonaws.com"]},
                            "Action": ["sts:AssumeRole"],
                        }
                    ],
                },
            },
        },
        "Fn": {
            "Type": "AWS::Lambda::Function",
            "Properties": {
                "Runtime": "python3.13",
                "Handler": "app.handler",
                "Role": {"Fn::GetAtt": ["FnRole", "Arn"]},
                "Code": {"ZipFile": "def handler(event, context):\n    return None\n"},
            },
        },
        "FnPermission": {
            "Type": "AWS::Lambda::Permission",
            "Properties": {
                "Action": "lambda:InvokeFunction",
                "FunctionName": {"Ref": "Fn"},
                "Principal": "events.amazonaws.com",
            },
        },
        "Key": {
            "Type": "AWS::KMS::Key",
            "Properties": {
                "KeyPolicy": {
                    "Version": "2012-10-17",
                    "Statement": [
                        {
                            "Effect": "Allow",
                            "Principal": {"AWS": {"Fn::Sub": "arn:${AWS::Partition}:iam::${AWS::AccountId}:root"}},
                            "Action": ["kms:DescribeKey", "kms:PutKeyPolicy"],
                            "Resource": "*",
                        },
                        {
                            "Effect": "Allow",
                            "Principal": {"AWS": {"Fn::GetAtt": ["FnRole", "Arn"]}},
                            "Action": "kms:Decrypt",
                            "Resource": "*",
                        },
                    ],
                }
            },
        },
        "Queue": {"Type": "AWS::SQS::Queue"},
        "QueuePolicy": {
            "Type": "AWS::SQS::QueuePolicy",
            "Properties": {
                "Queues": [{"Ref": "Queue"}],
                "PolicyDocument": {
                    "Version": "2012-10-17",
                    "Statement": [
                        {
                            "Effect": "Allow",
                            "Principal": {"Service": "sns.amazonaws.com"},
                            "Action": "sqs:SendMessage",
                            "Resource": "*",
                        }
                    ],
                },
            },
        },
    }
}


@pytest.fixture
def deployed(aws):
    """SMALL deployed as stack `mcp` (the queue policy set by hand: moto's CloudFormation does not make one)."""
    session = boto3.Session(region_name="us-east-1")
    made_by_moto = {"Resources": {k: v for k, v in SMALL["Resources"].items() if k != "QueuePolicy"}}
    session.client("cloudformation").create_stack(
        StackName="mcp", TemplateBody=json.dumps(made_by_moto), Capabilities=["CAPABILITY_IAM"]
    )
    sqs = session.client("sqs")
    [url] = sqs.list_queues()["QueueUrls"]
    policy = SMALL["Resources"]["QueuePolicy"]["Properties"]["PolicyDocument"]
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"Policy": json.dumps(policy)})
    return session


def test_a_live_stack_read_back_from_aws_that_is_its_template_has_no_difference(deployed):
    live, owned = verify.live_policies(deployed, "mcp")
    assert verify.differences(verify.expected_policies(SMALL), live, owned) == []


def test_access_added_outside_cloudformation_is_read_back_as_a_difference(deployed):
    # Given the deployed stack, changed by hand: its role trusted by another account, a public permission on its
    # function, and a role under its path that it does not own
    iam = deployed.client("iam")
    [role] = [r for r in iam.list_roles(PathPrefix="/mcp/")["Roles"]]
    trust = role["AssumeRolePolicyDocument"]
    trust["Statement"].append(
        {"Effect": "Allow", "Principal": {"AWS": "arn:aws:iam::999999999999:root"}, "Action": "sts:AssumeRole"}
    )
    iam.update_assume_role_policy(RoleName=role["RoleName"], PolicyDocument=json.dumps(trust))
    [function] = deployed.client("lambda").list_functions()["Functions"]
    deployed.client("lambda").add_permission(
        FunctionName=function["FunctionName"], StatementId="open", Action="lambda:InvokeFunction", Principal="*"
    )
    iam.create_role(RoleName="extra", Path="/mcp/", AssumeRolePolicyDocument=json.dumps(trust))

    # When verify-deployed reads the live stack
    live, owned = verify.live_policies(deployed, "mcp")
    found = verify.differences(verify.expected_policies(SMALL), live, owned)

    # Then each is a difference, naming where it is
    assert [line for line in found if line.startswith("trust FnRole: live only") and "999999999999" in line]
    assert [line for line in found if line.startswith("policy Fn: live only") and "'*'" in line]
    assert [line for line in found if line.startswith("trust outside-the-stack:") and "role/mcp/extra" in line]
