"""The GitHub deploy role and the stack's options (the edge, IAM callers, the VPC and its endpoints), evaluated by
the offline IAM evaluator (tests/iam/simulator.py) as in test_iam_evaluation.py: deployed for an option, the role
may make every call that option's resources need, scoped to the stack or to the values it was given, and none of
the unrelated calls beside them; deployed without it, none of the option's calls."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from tests.iam.simulator import Request
from tests.iam.stacks import ACCOUNT, REGION, Stack
from tests.template.test_iam_evaluation import ALLOWED, as_deployer, decisions, node  # noqa: F401 - node: fixture

CERTIFICATE = f"arn:aws:acm:us-east-1:{ACCOUNT}:certificate/abc-123"
ZONE = "Z0123456789ABC"
DOMAIN = "mcp.example.com"
PRINCIPAL = f"arn:aws:iam::{ACCOUNT}:role/ReportingAgent"
VPC_ID = "vpc-0123456789abcdef0"
VIA_CLOUDFORMATION = {"aws:CalledVia": ["cloudformation.amazonaws.com"]}
DENIED = ("ImplicitlyDenied", "ExplicitlyDenied")  # an evaluation error is neither
OTHER = Stack("mcp-prod")


def ec2(kind: str, name: str) -> str:
    return f"arn:aws:ec2:{REGION}:{ACCOUNT}:{kind}/{name}"


def records(names: list[str], types: list[str]) -> dict[str, Any]:
    """ChangeResourceRecordSets' request context (Route 53's record-set condition keys)."""
    return {
        "route53:ChangeResourceRecordSetsNormalizedRecordNames": names,
        "route53:ChangeResourceRecordSetsRecordTypes": types,
        "route53:ChangeResourceRecordSetsActions": ["UPSERT"] * len(names),
    }


def edge_deploys(stack: Stack) -> dict[str, Request]:
    zone = f"arn:aws:route53:::hostedzone/{ZONE}"
    return {
        "the origin secret": as_deployer(stack, "secretsmanager:CreateSecret", stack.arn("EdgeOriginSecret")),
        "its value, resolved into the origin header": as_deployer(
            stack, "secretsmanager:GetSecretValue", stack.arn("EdgeOriginSecret")
        ),
        "the web ACL": as_deployer(stack, "wafv2:CreateWebACL", stack.arn("EdgeWebAcl")),
        "the web ACL's update": as_deployer(stack, "wafv2:UpdateWebACL", stack.arn("EdgeWebAcl")),
        "the distribution": as_deployer(stack, "cloudfront:CreateDistribution", "*", **VIA_CLOUDFORMATION),
        "the distribution's update": as_deployer(
            stack, "cloudfront:UpdateDistribution", stack.arn("EdgeDistribution"), **VIA_CLOUDFORMATION
        ),
        "the certificate's read": as_deployer(stack, "acm:DescribeCertificate", CERTIFICATE),
        "the domain's alias records": as_deployer(
            stack, "route53:ChangeResourceRecordSets", zone, **records([DOMAIN, DOMAIN], ["A", "AAAA"])
        ),
        "the change's status": as_deployer(stack, "route53:GetChange", "arn:aws:route53:::change/C0123456789"),
    }


def edge_refusals(stack: Stack) -> dict[str, Request]:
    zone = f"arn:aws:route53:::hostedzone/{ZONE}"
    other_edge = Stack(OTHER.name, EDGE_STACK)
    return {
        "the other stack's origin secret": as_deployer(
            stack, "secretsmanager:GetSecretValue", other_edge.arn("EdgeOriginSecret")
        ),
        "the other stack's web ACL": as_deployer(stack, "wafv2:UpdateWebACL", other_edge.arn("EdgeWebAcl")),
        "a distribution changed outside CloudFormation": as_deployer(
            stack, "cloudfront:UpdateDistribution", stack.arn("EdgeDistribution")
        ),
        "a cache invalidation": as_deployer(
            stack, "cloudfront:CreateInvalidation", stack.arn("EdgeDistribution"), **VIA_CLOUDFORMATION
        ),
        "another certificate": as_deployer(
            stack, "acm:DescribeCertificate", f"arn:aws:acm:us-east-1:{ACCOUNT}:certificate/other"
        ),
        "deleting the certificate": as_deployer(stack, "acm:DeleteCertificate", CERTIFICATE),
        "another name in the zone": as_deployer(
            stack, "route53:ChangeResourceRecordSets", zone, **records([f"www.{DOMAIN}"], ["A"])
        ),
        "another record type for the domain": as_deployer(
            stack, "route53:ChangeResourceRecordSets", zone, **records([DOMAIN], ["MX"])
        ),
        "the domain in another zone": as_deployer(
            stack, "route53:ChangeResourceRecordSets", "arn:aws:route53:::hostedzone/ZOTHER", **records([DOMAIN], ["A"])
        ),
        "a new hosted zone": as_deployer(stack, "route53:CreateHostedZone", "*"),
    }


def iam_caller_deploys(stack: Stack) -> dict[str, Request]:
    alias = f"{stack.arn('McpServer')}:iam"
    return {
        "the AWS_IAM URL on the alias iam": as_deployer(
            stack, "lambda:CreateFunctionUrlConfig", alias, **{"lambda:FunctionUrlAuthType": "AWS_IAM"}
        ),
        "its permission for the named principal": as_deployer(
            stack, "lambda:AddPermission", alias, **{"lambda:Principal": PRINCIPAL}
        ),
    }


def iam_caller_refusals(stack: Stack) -> dict[str, Request]:
    alias = f"{stack.arn('McpServer')}:iam"
    return {
        "a permission for another principal": as_deployer(
            stack, "lambda:AddPermission", alias, **{"lambda:Principal": f"arn:aws:iam::{ACCOUNT}:role/Other"}
        ),
        "a permission for everyone on the alias iam": as_deployer(
            stack, "lambda:AddPermission", alias, **{"lambda:Principal": "*"}
        ),
        "an AWS_IAM URL on ToolWorker": as_deployer(
            stack,
            "lambda:CreateFunctionUrlConfig",
            stack.arn("ToolWorker"),
            **{"lambda:FunctionUrlAuthType": "AWS_IAM"},
        ),
        "the principal on the other stack's endpoint": as_deployer(
            stack, "lambda:AddPermission", f"{OTHER.arn('McpServer')}:iam", **{"lambda:Principal": PRINCIPAL}
        ),
    }


def vpc_deploys(stack: Stack) -> dict[str, Request]:
    return {
        "Lambda's check of the subnets": as_deployer(stack, "ec2:DescribeSubnets", "*"),
        "Lambda's check of the security groups": as_deployer(stack, "ec2:DescribeSecurityGroups", "*"),
        "Lambda's check of the VPC": as_deployer(stack, "ec2:DescribeVpcs", "*"),
    }


def vpc_refusals(stack: Stack) -> dict[str, Request]:
    return {
        "a network interface of its own": as_deployer(stack, "ec2:CreateNetworkInterface", ec2("subnet", "subnet-0a")),
        "opening a security group": as_deployer(
            stack, "ec2:AuthorizeSecurityGroupIngress", ec2("security-group", "sg-01")
        ),
        "a new VPC": as_deployer(stack, "ec2:CreateVpc", ec2("vpc", "*")),
    }


def endpoint_deploys(stack: Stack) -> dict[str, Request]:
    return {
        "an endpoint in the VPC": as_deployer(stack, "ec2:CreateVpcEndpoint", ec2("vpc", VPC_ID), **VIA_CLOUDFORMATION),
        "in the given subnets": as_deployer(
            stack, "ec2:CreateVpcEndpoint", ec2("subnet", "subnet-0a"), **VIA_CLOUDFORMATION
        ),
        "the endpoint itself": as_deployer(
            stack, "ec2:CreateVpcEndpoint", stack.arn("KmsInterfaceEndpoint"), **VIA_CLOUDFORMATION
        ),
        "its removal": as_deployer(
            stack, "ec2:DeleteVpcEndpoints", stack.arn("KmsInterfaceEndpoint"), **VIA_CLOUDFORMATION
        ),
        "CloudFormation's read of it": as_deployer(stack, "ec2:DescribeVpcEndpoints", "*"),
    }


def endpoint_refusals(stack: Stack) -> dict[str, Request]:
    return {
        "an endpoint in another VPC": as_deployer(
            stack, "ec2:CreateVpcEndpoint", ec2("vpc", "vpc-0fedcba9876543210"), **VIA_CLOUDFORMATION
        ),
        "removing an endpoint outside CloudFormation": as_deployer(
            stack, "ec2:DeleteVpcEndpoints", stack.arn("KmsInterfaceEndpoint")
        ),
        "a route in a route table": as_deployer(
            stack, "ec2:CreateRoute", ec2("route-table", "rtb-01"), **VIA_CLOUDFORMATION
        ),
    }


@dataclass(frozen=True)
class Option:
    stack: dict[str, str]  # the stack's parameters
    role: dict[str, str]  # the deploy role's
    deploys: Callable[[Stack], dict[str, Request]]
    refusals: Callable[[Stack], dict[str, Request]]


EDGE_STACK = {"Edge": "CloudFront", "CustomDomainName": DOMAIN, "CertificateArn": CERTIFICATE, "HostedZoneId": ZONE}
VPC_STACK = {"VpcSubnetIds": "subnet-0a,subnet-0b", "VpcSecurityGroupIds": "sg-01"}
OPTIONS = {
    "edge on a custom domain": Option(EDGE_STACK, EDGE_STACK, edge_deploys, edge_refusals),
    "IAM callers": Option(
        {"IamCallers": "Enabled", "IamCallerPrincipal": PRINCIPAL, "IamCallerTiers": "*=pro"},
        {"IamCallerPrincipal": PRINCIPAL},
        iam_caller_deploys,
        iam_caller_refusals,
    ),
    "VPC": Option(VPC_STACK, {"Vpc": "Enabled"}, vpc_deploys, vpc_refusals),
    "VPC endpoints": Option(
        {**VPC_STACK, "CreateVpcEndpoints": "Enabled", "VpcId": VPC_ID, "VpcRouteTableIds": "rtb-01"},
        {"Vpc": "Enabled", "VpcId": VPC_ID},
        endpoint_deploys,
        endpoint_refusals,
    ),
}


@pytest.mark.parametrize("option", OPTIONS.values(), ids=OPTIONS)
def test_deployed_for_an_option_the_role_may_deploy_it_and_nothing_unrelated(node, option):  # noqa: F811
    # Given the stack with the option, and its deploy role deployed for it
    stack = Stack("mcp", option.stack, option.role)
    # When IAM evaluates the calls the option's resources need
    needed = option.deploys(stack)
    # Then each is allowed
    assert dict(zip(needed, decisions(node, list(needed.values())), strict=True)) == dict.fromkeys(needed, ALLOWED)
    # And the unrelated calls beside them (other names, other stacks, outside CloudFormation) are not
    unrelated = option.refusals(stack)
    found = dict(zip(unrelated, decisions(node, list(unrelated.values())), strict=True))
    assert {call: decision for call, decision in found.items() if decision not in DENIED} == {}


@pytest.mark.parametrize("option", OPTIONS.values(), ids=OPTIONS)
def test_deployed_without_an_option_the_role_may_not_deploy_it(node, option):  # noqa: F811
    # Given the stack with the option, but its deploy role deployed with every option off
    stack = Stack("mcp", option.stack)
    # When IAM evaluates the calls the option's resources need
    needed = option.deploys(stack)
    found = dict(zip(needed, decisions(node, list(needed.values())), strict=True))
    # Then each is denied
    assert {call: decision for call, decision in found.items() if decision not in DENIED} == {}


def test_the_role_may_attach_every_managed_policy_sam_gives_the_functions_and_no_other(node):  # noqa: F811
    # Given the managed policies SAM attaches to the stack's function roles (VPC or not: Globals has a VpcConfig)
    stack = Stack("mcp")
    attached = sorted(
        {arn for role_id in set(stack.function_roles.values()) for arn in stack.resolved(
            stack.resources[role_id]["Properties"].get("ManagedPolicyArns", [])
        )}
    )  # fmt: skip
    assert any(arn.endswith("/AWSLambdaVPCAccessExecutionRole") for arn in attached)
    role = stack.arn("McpServerRole")
    bounded = {"iam:PermissionsBoundary": stack.boundary_arn}

    def attach(policy: str) -> Request:
        return as_deployer(stack, "iam:AttachRolePolicy", role, **bounded, **{"iam:PolicyARN": policy})

    # When the deploy role attaches each to a bounded role of the stack, Then each is allowed
    assert decisions(node, [attach(arn) for arn in attached]) == [ALLOWED] * len(attached)
    # And another AWS managed policy is not
    assert decisions(node, [attach("arn:aws:iam::aws:policy/AmazonEC2FullAccess")]) == ["ExplicitlyDenied"]
