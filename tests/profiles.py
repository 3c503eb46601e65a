"""The deploy profiles samconfig.toml names (its environments' parameter_overrides) and what the template creates
under each: read by the template tests, the local-stack test of each profile and the cost model."""

from __future__ import annotations

import shlex
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from devstack.stack.intrinsics import Scope
from devstack.stack.template import ROOT, load_template

SAMCONFIG = tomllib.loads((ROOT / "samconfig.toml").read_text())
PROFILE_NAMES = ("minimal", "full")
PART_SWITCHES = ("JobPipeline", "CallLog", "Probes")


@dataclass(frozen=True)
class Option:
    parameters: dict[str, str]  # set on top of a profile's
    adds: str  # what it adds, for docs/deploy.md's table


# The options docs/deploy.md's profile table lists; each is tested on top of every profile.
OPTIONS: dict[str, Option] = {
    "provisioned call log": Option(
        {"CallLogStreamMode": "PROVISIONED", "CallLogShardCount": "1"},
        "the call-log stream as one provisioned shard instead of on-demand (1 MB/s in, 1,000 records/s)",
    ),
    "no call-log telemetry": Option(
        {"CallLogTelemetry": "disabled"},
        "no platform reports (cold starts, durations, memory) in the call log; the extension's layer is not attached",
    ),
    "no job pipeline": Option(
        {"JobPipeline": "Disabled"},
        "the endpoint alone: analyze_dataset synchronously, no job tools, no tasks",
    ),
    "durable worker": Option(
        {"DurableWorker": "Enabled"},
        "long jobs as Lambda durable executions (checkpointed, up to DurableExecutionTimeoutSeconds); priced per "
        "durable operation and GB of checkpoints (docs/cost.md), nothing while idle but its three alarms",
    ),
    "builtin authorization server": Option(
        {"AuthMode": "oauth", "AuthorizationServerMode": "builtin"},
        "OAuth 2.1 sign-in for MCP clients (a Cognito pool, the authorization server, its table and signing key)",
    ),
    "tracing to X-Ray": Option(
        {"Tracing": "xray", "TracingSdkLayerArn": "arn:aws:lambda:us-east-1:123456789012:layer:otel-python:1"},
        "OpenTelemetry spans of the endpoint, the worker and the probes, sent to X-Ray (priced per span, docs/cost.md)",
    ),
    "CloudFront edge": Option(
        {"Edge": "CloudFront"},
        "a CloudFront distribution and a WAF web ACL (per-source rate limit, AWS managed rules) in front of the "
        "endpoint, which then refuses requests that go around it; us-east-1 only",
    ),
    "edge on a custom domain": Option(
        {
            "Edge": "CloudFront",
            "CustomDomainName": "mcp.example.com",
            "CertificateArn": "arn:aws:acm:us-east-1:123456789012:certificate/example",
            "HostedZoneId": "Z0123456789ABC",
        },
        "the edge on your domain (an ACM certificate in us-east-1, the Route 53 alias records); the OAuth resource "
        "follows the domain",
    ),
    "IAM callers": Option(
        {"IamCallers": "Enabled", "IamCallerPrincipal": "123456789012"},
        "a second Function URL (AWS_IAM) for agents signing with SigV4 and their own role",
    ),
    "VPC with endpoints": Option(
        {
            "VpcSubnetIds": "subnet-0a,subnet-0b",
            "VpcSecurityGroupIds": "sg-01",
            "CreateVpcEndpoints": "Enabled",
            "VpcId": "vpc-01",
            "VpcRouteTableIds": "rtb-01",
        },
        "every function in your subnets, with the DynamoDB and S3 gateway endpoints and 7 interface endpoints "
        "(2 AZs here)",
    ),
    "customer-managed key": Option(
        {"DataKmsKeyArn": "arn:aws:kms:us-east-1:123456789012:key/example"},
        "your KMS key for the tables, queues, stream, bucket and log groups (the key is yours: not counted)",
    ),
}
# What `make deploy` passes (deploy/deploy_parameters.py creates the boundary); the rules require one.
DEPLOYED_BOUNDARY = "arn:aws:iam::123456789012:policy/boundaries/profiles-permissions-boundary"


def profile_parameters(environment: str) -> dict[str, str]:
    """The parameter_overrides of one samconfig.toml environment, as `sam deploy --config-env` passes them."""
    overrides = SAMCONFIG[environment]["deploy"]["parameters"]["parameter_overrides"]
    return dict(pair.split("=", 1) for pair in shlex.split(overrides))


def deploy_scope(
    parameters: dict[str, Any],
    ref: Callable[[str], Any] = lambda logical_id: f"ref:{logical_id}",
    get_att: Callable[[str, str], Any] = lambda logical_id, attribute: f"arn:{logical_id}.{attribute}",
) -> Scope:
    """What CloudFormation evaluates the expanded template against for these parameters (in us-east-1)."""
    template = load_template()
    return Scope(
        parameters={**template.parameter_defaults(), "PermissionsBoundaryArn": DEPLOYED_BOUNDARY, **parameters},
        mappings=template.expanded.get("Mappings", {}),
        conditions=template.expanded.get("Conditions", {}),
        region="us-east-1",
        account_id="123456789012",
        stack_name="profiles",
        ref=ref,
        get_att=get_att,
    )


def created_resources(scope: Scope) -> dict[str, dict[str, Any]]:
    """The expanded template's resources whose condition holds in this scope: what the stack would have."""
    return {
        logical_id: resource
        for logical_id, resource in load_template().resources().items()
        if "Condition" not in resource or scope.condition(resource["Condition"])
    }
