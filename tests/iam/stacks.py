"""One deployed stack's policies and resource ARNs, as AWS would hold them: the expanded template, the deploy
role (deploy/github-oidc-role.yaml) and the boundary (deploy/permissions-boundary.yaml), resolved for a stack
name, with the physical names CloudFormation generates (<stack>-<LogicalId>-<suffix>; a bucket's in lower case;
the stack names `make deploy` accepts are short enough that none is truncated)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from samtranslator.yaml_helper import yaml_parse

from devstack.stack.intrinsics import Scope
from devstack.stack.template import ROOT, load_template

ACCOUNT = "123456789012"
REGION = "us-east-1"
TEMPLATE = load_template()
ROLE_TEMPLATE = yaml_parse((ROOT / "deploy" / "github-oidc-role.yaml").read_text())
BOUNDARY_TEMPLATE = yaml_parse((ROOT / "deploy" / "permissions-boundary.yaml").read_text())


def suffix(*parts: str) -> str:
    """A stand-in for CloudFormation's random suffix: 12 upper-case letters and digits, stable per name."""
    return hashlib.sha256("/".join(parts).encode()).hexdigest()[:12].upper()


@dataclass
class Stack:
    name: str
    parameters: dict[str, Any] = field(default_factory=dict)
    # The GitHub deploy role's option parameters (deploy/github-oidc-role.yaml: Edge, CustomDomainName, ...).
    role_options: dict[str, str] = field(default_factory=dict)

    @property
    def boundary_arn(self) -> str:
        return f"arn:aws:iam::{ACCOUNT}:policy/boundaries/{self.name}-permissions-boundary"

    @cached_property
    def resources(self) -> dict[str, dict[str, Any]]:
        """The expanded template's resources that this parameter set creates."""
        scope = self.scope()
        return {
            logical_id: resource
            for logical_id, resource in TEMPLATE.expanded["Resources"].items()
            if "Condition" not in resource or scope.condition(resource["Condition"])
        }

    def scope(self) -> Scope:
        return Scope(
            parameters={
                **TEMPLATE.parameter_defaults(),
                "PermissionsBoundaryArn": self.boundary_arn,
                **self.parameters,
            },
            mappings=TEMPLATE.expanded.get("Mappings", {}),
            conditions=TEMPLATE.expanded.get("Conditions", {}),
            region=REGION,
            account_id=ACCOUNT,
            stack_name=self.name,
            ref=self.ref,
            get_att=self.get_att,
        )

    def physical_name(self, logical_id: str) -> str:
        resource = TEMPLATE.expanded["Resources"][logical_id]
        props = resource.get("Properties", {})
        for name_property in ("LayerName", "Name", "AliasName", "DashboardName", "UserPoolName"):
            if name_property in props:
                return str(self.scope().resolve(props[name_property]))
        if resource["Type"] == "AWS::S3::Bucket":
            return f"{self.name}-{logical_id.lower()}-{suffix(self.name, logical_id).lower()}"
        return f"{self.name}-{logical_id}-{suffix(self.name, logical_id)}"

    def arn(self, logical_id: str) -> str:
        kind = TEMPLATE.expanded["Resources"][logical_id]["Type"]
        name = self.physical_name(logical_id)
        if kind in ("AWS::Lambda::Alias", "AWS::Lambda::Version"):
            function = self.arn(TEMPLATE.expanded["Resources"][logical_id]["Properties"]["FunctionName"]["Ref"])
            return f"{function}:live" if kind == "AWS::Lambda::Alias" else f"{function}:1"
        if kind == "AWS::SecretsManager::Secret":
            name = f"{name}-{suffix(name)[:6]}"
        elif kind == "AWS::KMS::Key":
            name = f"{suffix(self.name, logical_id).lower()}-0000-4000-8000-000000000000"
        elif kind == "AWS::Logs::LogGroup":
            name = self.physical_log_group(logical_id)
        elif kind == "AWS::Cognito::UserPool":  # named by its id, <region>_<random>
            name = f"{REGION}_{suffix(self.name, logical_id)[:9]}"
        return ARN_FORMATS.get(kind, "arn:aws:cloudformation:{region}:{account}:{logical_id}/{name}").format(
            region=REGION, account=ACCOUNT, stack=self.name, name=name, logical_id=logical_id
        )

    def durable_execution(self, function_id: str, name: str = "job-1") -> str:
        """A durable execution of a function's version 1: executions are sub-resources of a version, never of an
        alias (https://docs.aws.amazon.com/lambda/latest/dg/durable-security.html)."""
        return f"{self.arn(function_id)}:1/durable-execution/{name}/0123abcd-0000-4000-8000-000000000000"

    def key_aliases(self, key_id: str) -> list[str]:
        """The aliases the stack points at a key: kms:ResourceAliases in every request on it."""
        return [
            self.physical_name(logical_id)
            for logical_id, resource in self.resources.items()
            if resource["Type"] == "AWS::KMS::Alias" and resource["Properties"]["TargetKeyId"] == {"Ref": key_id}
        ]

    def resource_tags(self, logical_id: str) -> dict[str, str]:
        """aws:ResourceTag/<key> of a resource, as the template tags it (CloudFormation's own aws: tags aside)."""
        props = self.resources[logical_id]["Properties"]
        tags = self.resolved(props.get("Tags", props.get("UserPoolTags", {})))
        pairs = {tag["Key"]: tag["Value"] for tag in tags} if isinstance(tags, list) else tags
        return {f"aws:ResourceTag/{key}": str(value) for key, value in pairs.items()}

    def physical_log_group(self, logical_id: str) -> str:
        props = TEMPLATE.expanded["Resources"][logical_id]["Properties"]
        return str(self.scope().resolve(props["LogGroupName"]))

    def ref(self, logical_id: str) -> str:
        kind = TEMPLATE.expanded["Resources"][logical_id]["Type"]
        if kind in ("AWS::SQS::Queue",):
            return f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/{self.physical_name(logical_id)}"
        if kind in ("AWS::SNS::Topic", "AWS::SecretsManager::Secret", "AWS::Lambda::Alias", "AWS::Lambda::Version",
                    "AWS::Lambda::LayerVersion"):  # fmt: skip
            return self.arn(logical_id)
        if kind in ("AWS::KMS::Key", "AWS::Cognito::UserPool"):
            return self.arn(logical_id).split("/")[-1]
        return self.physical_name(logical_id)

    def get_att(self, logical_id: str, attribute: str) -> str:
        if attribute in ("QueueName", "TopicName"):
            return self.physical_name(logical_id)
        if attribute == "StreamArn":
            return f"{self.arn(logical_id)}/stream/2026-01-01T00:00:00.000"
        if attribute == "FunctionUrl":
            return f"https://{suffix(self.name, logical_id).lower()}.lambda-url.{REGION}.on.aws/"
        return self.arn(logical_id)

    # ------------------------------------------------------------------ policies
    def resolved(self, value: Any) -> Any:
        return self.scope().resolve(value)

    def role_policies(self, role_id: str) -> list[dict[str, Any]]:
        """A role's identity policies: its inline ones, the stack's inline policies that name it, the AWS-managed
        ones SAM attaches (only their grants this stack's functions use: X-Ray and CloudWatch Logs)."""
        props = self.resources[role_id]["Properties"]
        documents = [policy["PolicyDocument"] for policy in self.resolved(props.get("Policies", []))]
        for resource in self.resources.values():
            if resource["Type"] != "AWS::IAM::Policy":
                continue
            if {"Ref": role_id} in self.chosen(resource["Properties"]["Roles"]):
                documents.append(self.resolved(resource["Properties"]["PolicyDocument"]))
        for managed in self.resolved(props.get("ManagedPolicyArns", [])):
            documents.append(AWS_MANAGED[managed.split("/")[-1]])
        return documents

    def chosen(self, expressions: list[Any]) -> list[Any]:
        """A list as written, each Fn::If replaced by the branch its condition picks (AWS::NoValue dropped)."""
        picked = []
        for expression in expressions:
            while isinstance(expression, dict) and "Fn::If" in expression:
                name, when_true, when_false = expression["Fn::If"]
                expression = when_true if self.scope().condition(name) else when_false
            if expression != {"Ref": "AWS::NoValue"}:
                picked.append(expression)
        return picked

    @property
    def function_roles(self) -> dict[str, str]:
        """Each function's logical id -> its role's."""
        return {
            logical_id: self.resolved_role(resource["Properties"]["Role"])
            for logical_id, resource in self.resources.items()
            if resource["Type"] == "AWS::Lambda::Function"
        }

    @staticmethod
    def resolved_role(expression: Any) -> str:
        return str(expression["Fn::GetAtt"][0])

    def role_arn(self, role_id: str) -> str:
        return self.arn(role_id)

    @property
    def boundary(self) -> dict[str, Any]:
        document = BOUNDARY_TEMPLATE["Resources"]["PermissionsBoundary"]["Properties"]["PolicyDocument"]
        return self.deploy_scope(
            BOUNDARY_TEMPLATE, DatasetBucketName=self.parameters.get("DatasetBucketName", "")
        ).resolve(document)

    @property
    def deploy_role_policies(self) -> list[dict[str, Any]]:
        props = ROLE_TEMPLATE["Resources"]["DeployRole"]["Properties"]
        scope = self.deploy_scope(
            ROLE_TEMPLATE, GitHubRepository="owner/repo", GitHubEnvironment="default", **self.role_options
        )
        documents = [scope.resolve(policy["PolicyDocument"]) for policy in props.get("Policies", [])]
        for reference in props.get("ManagedPolicyArns", []):
            policy = ROLE_TEMPLATE["Resources"][reference["Ref"]]["Properties"]
            documents.append(scope.resolve(policy["PolicyDocument"]))
        return documents

    @property
    def deploy_role_arn(self) -> str:
        return f"arn:aws:iam::{ACCOUNT}:role/deploy-role-{self.name}-DeployRole-{suffix(self.name, 'deploy')}"

    @property
    def trust_policy(self) -> dict[str, Any]:
        props = ROLE_TEMPLATE["Resources"]["DeployRole"]["Properties"]
        scope = self.deploy_scope(ROLE_TEMPLATE, GitHubRepository="owner/repo", GitHubEnvironment="prod")
        return scope.resolve(props["AssumeRolePolicyDocument"])

    def deploy_scope(self, template: dict[str, Any], **parameters: Any) -> Scope:
        defaults = {name: spec.get("Default") for name, spec in template.get("Parameters", {}).items()}
        return Scope(
            parameters={**defaults, "StackName": self.name, **parameters},
            mappings={},
            conditions=template.get("Conditions", {}),
            region=REGION,
            account_id=ACCOUNT,
            stack_name=f"deploy-role-{self.name}",
            ref=lambda logical_id: f"arn:aws:iam::{ACCOUNT}:oidc-provider/token.actions.githubusercontent.com",
        )

    def resource_policy(self, logical_id: str) -> dict[str, Any] | None:
        """The policy AWS evaluates with a request on this resource: a key's, a queue's or a bucket's."""
        resource = self.resources[logical_id]
        if resource["Type"] == "AWS::KMS::Key":
            return self.resolved(resource["Properties"]["KeyPolicy"])
        for other in self.resources.values():
            props = other.get("Properties", {})
            if other["Type"] == "AWS::SQS::QueuePolicy" and {"Ref": logical_id} in props["Queues"]:
                return self.resolved(props["PolicyDocument"])
            if other["Type"] == "AWS::S3::BucketPolicy" and props["Bucket"] == {"Ref": logical_id}:
                return self.resolved(props["PolicyDocument"])
        return None


# ARNs by resource type, as AWS forms them from a physical name (CloudFormation's generated one, or the template's).
ARN_FORMATS = {
    "AWS::IAM::Role": "arn:aws:iam::{account}:role/{stack}/{name}",
    "AWS::Lambda::Function": "arn:aws:lambda:{region}:{account}:function:{name}",
    "AWS::Lambda::LayerVersion": "arn:aws:lambda:{region}:{account}:layer:{name}:1",
    "AWS::SQS::Queue": "arn:aws:sqs:{region}:{account}:{name}",
    "AWS::DynamoDB::Table": "arn:aws:dynamodb:{region}:{account}:table/{name}",
    "AWS::Kinesis::Stream": "arn:aws:kinesis:{region}:{account}:stream/{name}",
    "AWS::SNS::Topic": "arn:aws:sns:{region}:{account}:{name}",
    "AWS::S3::Bucket": "arn:aws:s3:::{name}",
    "AWS::SecretsManager::Secret": "arn:aws:secretsmanager:{region}:{account}:secret:{name}",
    "AWS::KMS::Key": "arn:aws:kms:{region}:{account}:key/{name}",
    "AWS::KMS::Alias": "arn:aws:kms:{region}:{account}:{name}",
    "AWS::CloudWatch::Alarm": "arn:aws:cloudwatch:{region}:{account}:alarm:{name}",
    "AWS::Events::Rule": "arn:aws:events:{region}:{account}:rule/{name}",
    "AWS::Logs::LogGroup": "arn:aws:logs:{region}:{account}:log-group:{name}",
    "AWS::Cognito::UserPool": "arn:aws:cognito-idp:{region}:{account}:userpool/{name}",
    "AWS::SSM::Parameter": "arn:aws:ssm:{region}:{account}:parameter{name}",  # the name begins with /
    # CLOUDFRONT-scoped: in us-east-1, under global/; the id after the name is random
    "AWS::WAFv2::WebACL": "arn:aws:wafv2:us-east-1:{account}:global/webacl/{name}/0a1b2c3d-0000-4000-8000-000000000000",
    "AWS::CloudFront::Distribution": "arn:aws:cloudfront::{account}:distribution/E2ABCDEF012345",
    "AWS::EC2::VPCEndpoint": "arn:aws:ec2:{region}:{account}:vpc-endpoint/vpce-0123456789abcdef0",
}

# What the AWS-managed policies SAM attaches to function roles grant (their published documents).
FUNCTION_LOGS = ["logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents"]
AWS_MANAGED = {
    "AWSLambdaBasicExecutionRole": {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Action": FUNCTION_LOGS,
                "Resource": "*",
            }
        ],
    },
    # SAM attaches it to every function role because Globals VpcConfig is present (an Fn::If, on with VpcSubnetIds).
    "AWSLambdaVPCAccessExecutionRole": {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Action": [
                    *FUNCTION_LOGS,
                    "ec2:CreateNetworkInterface",
                    "ec2:DescribeNetworkInterfaces",
                    "ec2:DescribeSubnets",
                    "ec2:DeleteNetworkInterface",
                    "ec2:AssignPrivateIpAddresses",
                    "ec2:UnassignPrivateIpAddresses",
                ],
                "Resource": "*",
            }
        ],
    },
    # SAM attaches it instead of AWSLambdaBasicExecutionRole to a function with DurableConfig
    # (https://docs.aws.amazon.com/aws-managed-policy/latest/reference/AWSLambdaBasicDurableExecutionRolePolicy.html).
    "AWSLambdaBasicDurableExecutionRolePolicy": {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Action": [*FUNCTION_LOGS, "lambda:CheckpointDurableExecution", "lambda:GetDurableExecutionState"],
                "Resource": "*",
            }
        ],
    },
    "AWSXrayWriteOnlyAccess": {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Action": [
                    "xray:PutTraceSegments",
                    "xray:PutTelemetryRecords",
                    "xray:GetSamplingRules",
                    "xray:GetSamplingTargets",
                    "xray:GetSamplingStatisticSummaries",
                ],
                "Resource": "*",
            }
        ],
    },
}
