"""deploy/github-oidc-role.yaml grants the deploy role what creating every resource type of the stack needs,
so a new resource type fails here instead of in the first CI deploy after it."""

from __future__ import annotations

from typing import Any

from samtranslator.yaml_helper import yaml_parse

from devstack.template import ROOT
from tests.template.test_invariants import RESOURCES, as_list

ROLE_TEMPLATE = yaml_parse((ROOT / "deploy" / "github-oidc-role.yaml").read_text())
STATEMENTS = ROLE_TEMPLATE["Resources"]["DeployRole"]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]
# The call CloudFormation makes (as the deploy role) to create each resource type of the expanded template.
CREATE_ACTION = {
    "AWS::CloudWatch::Alarm": "cloudwatch:PutMetricAlarm",
    "AWS::CloudWatch::Dashboard": "cloudwatch:PutDashboard",
    "AWS::Cognito::UserPool": "cognito-idp:CreateUserPool",
    "AWS::Cognito::UserPoolClient": "cognito-idp:CreateUserPoolClient",
    "AWS::Cognito::UserPoolDomain": "cognito-idp:CreateUserPoolDomain",
    "AWS::Cognito::UserPoolResourceServer": "cognito-idp:CreateResourceServer",
    "AWS::DynamoDB::Table": "dynamodb:CreateTable",
    "AWS::Events::Rule": "events:PutRule",
    "AWS::IAM::ManagedPolicy": "iam:CreatePolicy",
    "AWS::IAM::Role": "iam:CreateRole",
    "AWS::KMS::Alias": "kms:CreateAlias",
    "AWS::KMS::Key": "kms:CreateKey",
    "AWS::Kinesis::Stream": "kinesis:CreateStream",
    "AWS::Lambda::Alias": "lambda:CreateAlias",
    "AWS::Lambda::EventInvokeConfig": "lambda:PutFunctionEventInvokeConfig",
    "AWS::Lambda::EventSourceMapping": "lambda:CreateEventSourceMapping",
    "AWS::Lambda::Function": "lambda:CreateFunction",
    "AWS::Lambda::LayerVersion": "lambda:PublishLayerVersion",
    "AWS::Lambda::Permission": "lambda:AddPermission",
    "AWS::Lambda::Url": "lambda:CreateFunctionUrlConfig",
    "AWS::Lambda::Version": "lambda:PublishVersion",
    "AWS::Logs::LogGroup": "logs:CreateLogGroup",
    "AWS::SNS::Subscription": "sns:Subscribe",
    "AWS::SNS::Topic": "sns:CreateTopic",
    "AWS::SQS::Queue": "sqs:CreateQueue",
    "AWS::SQS::QueuePolicy": "sqs:SetQueueAttributes",
    "AWS::SecretsManager::Secret": "secretsmanager:CreateSecret",
}


def granted(action: str) -> list[dict[str, Any]]:
    return [s for s in STATEMENTS if s["Effect"] == "Allow" and action in as_list(s["Action"])]


def test_the_deploy_role_may_create_every_resource_type_of_the_stack():
    for type_name in sorted({resource["Type"] for resource in RESOURCES.values()}):
        assert type_name in CREATE_ACTION, f"{type_name}: add it to the deploy role and to CREATE_ACTION"
        assert granted(CREATE_ACTION[type_name]), type_name


def test_the_deploy_role_is_trusted_by_one_repository_environment_and_reads_only_the_published_layers():
    [trust] = ROLE_TEMPLATE["Resources"]["DeployRole"]["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    conditions = trust["Condition"]["StringEquals"]
    assert conditions["token.actions.githubusercontent.com:aud"] == "sts.amazonaws.com"
    assert conditions["token.actions.githubusercontent.com:sub"] == {
        "Fn::Sub": "repo:${GitHubRepository}:environment:${GitHubEnvironment}"
    }
    [layers] = [s for s in granted("lambda:GetLayerVersion") if s["Sid"] == "PublishedLayers"]
    assert all(":layer:LambdaAdapterLayer" in r["Fn::Sub"] or ":layer:AWS-Parameters-and-Secrets" in r["Fn::Sub"]
               for r in layers["Resource"])  # fmt: skip


def test_only_actions_without_resource_types_are_granted_on_every_resource():
    unscoped = {s["Sid"] for s in STATEMENTS if s["Resource"] == "*" and "Condition" not in s}
    assert unscoped == {
        "ValidateTemplates",
        "ReadEventSourceMappings",
        "DescribeLogGroups",
        "OpsAlarmKey",
        "CreateUserPools",
    }


def test_the_deploy_role_may_publish_every_layer_of_the_stack():
    # Given the stack's own layers, by the names SAM gives them (their logical ids)
    layers = [r["Properties"]["LayerName"] for r in RESOURCES.values() if r["Type"] == "AWS::Lambda::LayerVersion"]
    assert layers
    # When the deploy role's layer statements are read
    publishable = {r["Fn::Sub"] for s in granted("lambda:PublishLayerVersion") for r in as_list(s["Resource"])}
    # Then each layer, and its versions, may be published
    for name in layers:
        prefix = "arn:${AWS::Partition}:lambda:${AWS::Region}:${AWS::AccountId}:layer:"
        assert {f"{prefix}{name}", f"{prefix}{name}:*"} <= publishable, name
