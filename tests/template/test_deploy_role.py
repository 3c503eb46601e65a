"""deploy/github-oidc-role.yaml grants the deploy role what creating every resource type of the stack needs, on
that stack only, and cannot make itself administrator: every role it creates or changes carries the stack's
permissions boundary (deploy/permissions-boundary.yaml), which allows what the stack's roles do and no IAM."""

from __future__ import annotations

import fnmatch
import json
from typing import Any

import pytest
from samtranslator.yaml_helper import yaml_parse

from devstack.stack.intrinsics import Scope
from devstack.stack.template import ROOT
from tests.template.test_invariants import RESOURCES, all_statements, as_list, of_type

ROLE_TEMPLATE = yaml_parse((ROOT / "deploy" / "github-oidc-role.yaml").read_text())
DEPLOY_POLICIES = {
    reference["Ref"]: ROLE_TEMPLATE["Resources"][reference["Ref"]]["Properties"]["PolicyDocument"]
    for reference in ROLE_TEMPLATE["Resources"]["DeployRole"]["Properties"]["ManagedPolicyArns"]
}


def option_on(statement: dict[str, Any]) -> dict[str, Any]:
    """An option's statement (`Fn::If: [<option>, <statement>, AWS::NoValue]`) as it is with the option given."""
    return option_on(statement["Fn::If"][1]) if "Fn::If" in statement else statement


STATEMENTS = [option_on(statement) for document in DEPLOY_POLICIES.values() for statement in document["Statement"]]
ALLOWS = [s for s in STATEMENTS if s["Effect"] == "Allow"]
DENIES = [s for s in STATEMENTS if s["Effect"] == "Deny"]
BOUNDARY_TEMPLATE = yaml_parse((ROOT / "deploy" / "permissions-boundary.yaml").read_text())
BOUNDARY = BOUNDARY_TEMPLATE["Resources"]["PermissionsBoundary"]["Properties"]
BOUNDARY_ARN = "arn:${AWS::Partition}:iam::${AWS::AccountId}:policy/boundaries/${StackName}-permissions-boundary"

# The call CloudFormation makes (as the deploy role) to create each resource type of the expanded template.
CREATE_ACTION = {
    "AWS::CloudWatch::Alarm": "cloudwatch:PutMetricAlarm",
    "AWS::CloudWatch::Dashboard": "cloudwatch:PutDashboard",
    "AWS::CodeDeploy::Application": "codedeploy:CreateApplication",
    "AWS::CodeDeploy::DeploymentGroup": "codedeploy:CreateDeploymentGroup",
    "AWS::Cognito::UserPool": "cognito-idp:CreateUserPool",
    "AWS::Cognito::UserPoolClient": "cognito-idp:CreateUserPoolClient",
    "AWS::Cognito::UserPoolDomain": "cognito-idp:CreateUserPoolDomain",
    "AWS::Cognito::UserPoolResourceServer": "cognito-idp:CreateResourceServer",
    "AWS::DynamoDB::Table": "dynamodb:CreateTable",
    "AWS::Events::Rule": "events:PutRule",
    "AWS::IAM::Policy": "iam:PutRolePolicy",
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
    "AWS::S3::Bucket": "s3:CreateBucket",
    "AWS::S3::BucketPolicy": "s3:PutBucketPolicy",
    "AWS::SNS::Subscription": "sns:Subscribe",
    "AWS::SNS::Topic": "sns:CreateTopic",
    "AWS::SQS::Queue": "sqs:CreateQueue",
    "AWS::SQS::QueuePolicy": "sqs:SetQueueAttributes",
    "AWS::SecretsManager::Secret": "secretsmanager:CreateSecret",
    "AWS::SSM::Parameter": "ssm:PutParameter",
    # CloudFormation invokes a custom resource's function with the deployer's credentials
    "Custom::SelfProbeKey": "lambda:InvokeFunction",
    # The options, when the role is deployed for them (DeployStackOptions)
    "AWS::CloudFront::Distribution": "cloudfront:CreateDistribution",
    "AWS::WAFv2::WebACL": "wafv2:CreateWebACL",
    "AWS::Route53::RecordSetGroup": "route53:ChangeResourceRecordSets",
    "AWS::EC2::VPCEndpoint": "ec2:CreateVpcEndpoint",
}
# Allow statements that name no resource of the stack, and why each is safe without one.
EXCEPTIONS = {
    "Transforms": "AWS's own macros (SAM, language extensions); the change set they expand is this stack's",
    "ArtifactsBucketStack": "DescribeStacks of SAM's shared bootstrap stack, to find the artifacts bucket",
    "ValidateTemplates": "cloudformation:ValidateTemplate has no resource type",
    "ListStacks": "cloudformation:ListStacks has no resource type; make deploy checks stack names with it",
    "GenerateSecretValues": "secretsmanager:GetRandomPassword has no resource type (GenerateSecretString)",
    "VerifyDeployedReads": "make verify-deployed: iam:ListRoles has no resource type, a key's ARN is random; read only",
    "ArtifactsBucketLocation": "s3:GetBucketLocation reads the shared bucket's region, no object",
    "ReadEventSourceMappings": "Get/ListEventSourceMappings have no resource type or condition key",
    "PublishedLayers": "GetLayerVersion of AWS's published Web Adapter and Parameters and Secrets layers",
    "PredefinedDeploymentConfigs": "GetDeploymentConfig of AWS's CodeDeployDefault.Lambda* configurations",
    "DescribeLogGroups": "logs:DescribeLogGroups has no resource-level permissions",
    "EventSourceMappingTags": "a mapping's ARN is a random id; tagging one grants nothing",
    "StreamEncryptionKey": "names the aws/kinesis key to Kinesis; allows no KMS action",
    "EndpointTokenKeyAlias": "CreateAlias is also authorised on the target key (a random id); the alias is the stack's",
    "DescribeUserPoolDomains": "cognito-idp:DescribeUserPoolDomain has no resource type",
    "OpsAlarmKey": "a key's ARN is random; only calls made through CloudFormation (aws:CalledVia), no imports",
    "EdgeDistribution": "a distribution's ARN is random, no tag condition; only calls made through CloudFormation",
    "EdgeCertificate": "acm:DescribeCertificate of the one certificate the operator names; read only",
    "EdgeDnsRecords": "only the A and AAAA records of the domain the operator names, in the zone named",
    "EdgeDnsReads": "the named zone and a change's status (a random id); read only",
    "VpcLookups": "ec2:DescribeSubnets/SecurityGroups/Vpcs have no resource type; Lambda checks the VPC with them",
    "VpcEndpointsInTheVpc": "ec2:CreateVpcEndpoint in the one VPC the operator names",
    "VpcEndpoints": "an endpoint's ARN is random; only calls made through CloudFormation (aws:CalledVia), no imports",
    "DescribeVpcEndpoints": "ec2:DescribeVpcEndpoints and DescribePrefixLists have no resource type",
}


def granted(action: str) -> list[dict[str, Any]]:
    return [s for s in ALLOWS if action in as_list(s["Action"])]


def resources(statement: dict[str, Any]) -> list[Any]:
    return as_list(statement["Resource"])


def text(value: Any) -> str:
    return json.dumps(value)


def test_the_deploy_role_may_create_every_resource_type_of_the_stack():
    # Given every resource type of the template, its options' included
    for type_name in sorted({resource["Type"] for resource in RESOURCES.values()}):
        # Then the role (deployed for the options) may make the call that creates it
        assert type_name in CREATE_ACTION, f"{type_name}: add it to the deploy role and to CREATE_ACTION"
        assert granted(CREATE_ACTION[type_name]), type_name


@pytest.mark.parametrize("statement", ALLOWS, ids=[s["Sid"] for s in ALLOWS])
def test_every_allow_names_the_stack_or_carries_a_stack_condition_or_is_a_listed_exception(statement):
    # Given one Allow statement of the deploy role
    names_the_stack = all("${StackName}" in text(resource) for resource in as_list(statement["Resource"]))
    stack_condition = "${StackName}" in text(statement.get("Condition", {})) or "StackName" in text(
        statement.get("Condition", {})
    )
    # Then each of its resources names the stack, or its condition does, or it is an exception with a reason
    assert names_the_stack or stack_condition or statement["Sid"] in EXCEPTIONS, statement["Sid"]
    if statement["Sid"] in EXCEPTIONS:
        assert not (names_the_stack or stack_condition), f"{statement['Sid']} is scoped now: drop the exception"


def test_the_exception_list_names_only_statements_of_the_role():
    assert set(EXCEPTIONS) <= {s["Sid"] for s in ALLOWS}


def test_roles_are_created_and_changed_only_with_the_stacks_boundary():
    # Given every Allow that creates a role or writes what a role may do
    escalating = {
        "iam:CreateRole",
        "iam:PutRolePolicy",
        "iam:AttachRolePolicy",
        "iam:PutRolePermissionsBoundary",
        "iam:DeleteRolePolicy",
        "iam:DetachRolePolicy",
    }
    for action in escalating:
        statements = granted(action)
        assert statements, action
        # Then each requires the boundary policy of deploy/permissions-boundary.yaml on the role
        for statement in statements:
            condition = statement["Condition"]["StringEquals"]["iam:PermissionsBoundary"]
            assert condition == {"Fn::Sub": BOUNDARY_ARN}, action
    # And no Allow lets it remove a boundary or rewrite a trust policy; a Deny removes boundaries outright
    for action in ("iam:DeleteRolePermissionsBoundary", "iam:UpdateAssumeRolePolicy", "iam:*", "iam:UpdateRole"):
        assert not granted(action), action
    assert any("iam:DeleteRolePermissionsBoundary" in as_list(s["Action"]) and s["Resource"] == "*" for s in DENIES)
    # And the boundary itself may not be changed by the role
    [fixed] = [s for s in DENIES if s["Sid"] == "BoundaryIsFixed"]
    assert {"iam:CreatePolicyVersion", "iam:SetDefaultPolicyVersion", "iam:DeletePolicy"} <= set(fixed["Action"])
    assert fnmatch.fnmatch(BOUNDARY_ARN, fixed["Resource"]["Fn::Sub"])


def test_roles_are_passed_only_to_lambda_and_codedeploy_and_only_the_stacks():
    [passing] = granted("iam:PassRole")
    assert passing["Resource"] == {"Fn::Sub": "arn:${AWS::Partition}:iam::${AWS::AccountId}:role/${StackName}/*"}
    assert set(passing["Condition"]["StringEquals"]["iam:PassedToService"]) == {
        "lambda.amazonaws.com",
        "codedeploy.amazonaws.com",
    }


def test_the_boundary_template_names_the_arn_the_role_requires_and_denies_all_iam():
    # Given the boundary as deploy/permissions-boundary.yaml creates it
    path, name = BOUNDARY["Path"], BOUNDARY["ManagedPolicyName"]["Fn::Sub"]
    assert BOUNDARY_ARN.endswith(f":policy{path}{name}")
    statements = BOUNDARY["PolicyDocument"]["Statement"]
    denies = [s for s in statements if s.get("Effect") == "Deny"]
    # Then a bounded role can neither use IAM nor shed its boundary
    assert any(s["Action"] == "iam:*" and s["Resource"] == "*" for s in denies)
    # (the iam:* deny covers it: IAM matches actions by wildcard)
    assert any(
        fnmatch.fnmatchcase("iam:DeleteRolePermissionsBoundary", action)
        for s in denies
        for action in as_list(s["Action"])
    )


def boundary_allows() -> list[dict[str, Any]]:
    found = []
    for statement in BOUNDARY["PolicyDocument"]["Statement"]:
        if "Fn::If" in statement:
            statement = statement["Fn::If"][1]
        if statement["Effect"] == "Allow":
            found.append(statement)
    return found


def test_the_boundary_allows_every_action_a_role_of_the_stack_is_given():
    # Given every action any role of the expanded template is granted (inline, or by a stack-managed policy)
    actions = {action.lower() for _, statement in all_statements() for action in as_list(statement["Action"])}
    for policy in of_type("AWS::IAM::ManagedPolicy").values():
        for statement in as_list(policy["Properties"]["PolicyDocument"]["Statement"]):
            actions |= {action.lower() for action in as_list(statement["Action"])}
    allowed = [pattern.lower() for s in boundary_allows() for pattern in as_list(s["Action"])]
    # Then the boundary allows each one (a role's grant beyond it would silently never work)
    missing = sorted(a for a in actions if not any(fnmatch.fnmatch(a, p) for p in allowed))
    assert missing == [], f"add to deploy/permissions-boundary.yaml: {missing}"


# Boundary statements that name no resource of the stack, and why each is safe without one.
BOUNDARY_EXCEPTIONS = {
    # X-Ray segments and dynamodb:ListStreams have no resource type; Lambda's network interfaces for VpcSubnetIds
    # (AWSLambdaVPCAccessExecutionRole) name no stack.
    "Unscoped": "actions without a resource type, and the ENIs of VpcSubnetIds",
    # A key's id is random, so the boundary names the key by its alias (kms:ResourceAliases); the key policy
    # decides who may encrypt or decrypt, always with a context.
    "EndpointTokens": "kms:Encrypt/Decrypt only on the key behind alias/<stack>-endpoint-tokens, with a context",
    "AccessTokenSigning": "kms:Sign/GetPublicKey only on the key behind alias/<stack>-token-signing",
    # A pool's id is random: the boundary names the stack's pool by the stack's tag on it.
    "Pool": "cognito-idp:AdminGetUser/AdminListGroupsForUser only on the pool tagged with the stack's name",
}


def test_the_boundary_names_the_stack_in_every_allow_but_traces():
    for statement in boundary_allows():
        if statement["Sid"] in BOUNDARY_EXCEPTIONS:
            continue
        resources = as_list(statement["Resource"])
        assert all("${StackName}" in text(r) or "${DatasetBucketName}" in text(r) for r in resources) or (
            "kms:ViaService" in text(statement.get("Condition"))
        ), statement["Sid"]


def test_the_deploy_role_is_trusted_by_one_repository_environment_and_reads_only_the_published_layers():
    [trust] = ROLE_TEMPLATE["Resources"]["DeployRole"]["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    conditions = trust["Condition"]["StringEquals"]
    assert conditions["token.actions.githubusercontent.com:aud"] == "sts.amazonaws.com"
    assert conditions["token.actions.githubusercontent.com:sub"] == {
        "Fn::Sub": "repo:${GitHubRepository}:environment:${GitHubEnvironment}:ref:refs/heads/main"
    }
    [layers] = [s for s in granted("lambda:GetLayerVersion") if s["Sid"] == "PublishedLayers"]
    assert all(":layer:LambdaAdapterLayer" in r["Fn::Sub"] or ":layer:AWS-Parameters-and-Secrets" in r["Fn::Sub"]
               for r in layers["Resource"])  # fmt: skip


def test_only_actions_without_resource_types_are_granted_on_every_resource_without_a_condition():
    unscoped = {s["Sid"] for s in ALLOWS if s["Resource"] == "*" and "Condition" not in s}
    assert unscoped == {
        "ValidateTemplates",
        "ListStacks",
        "GenerateSecretValues",
        "VerifyDeployedReads",
        "ReadEventSourceMappings",
        "DescribeLogGroups",
        "DescribeUserPoolDomains",
        "VpcLookups",
        "DescribeVpcEndpoints",
    }


def test_the_secret_and_the_artifacts_are_this_stacks_only():
    # The API key secret is named <stack>/api-keys by the template; the role matches it and its 6-character suffix
    assert RESOURCES["ApiKeysSecret"]["Properties"]["Name"] == {"Fn::Sub": "${AWS::StackName}/api-keys"}
    # (and the request-state key, <stack>/request-state-key, alike)
    names = (
        ":secret:${StackName}/api-keys-??????",
        ":secret:${StackName}/request-state-key-??????",
        ":secret:${StackName}/edge-origin-??????",
    )
    for statement in granted("secretsmanager:PutSecretValue") + granted("secretsmanager:UpdateSecret"):
        resources = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
        assert all(resource["Fn::Sub"].endswith(names) for resource in resources)
    # And S3 objects only under the stack's prefix, which samconfig.toml sets to the stack name
    [upload] = granted("s3:PutObject")
    assert upload["Resource"]["Fn::Sub"].endswith("-*/${StackName}/*")
    samconfig = (ROOT / "samconfig.toml").read_text()
    for environment in ("default", "prod"):
        section = samconfig.split(f"[{environment}.deploy.parameters]")[1].split("\n[")[0]
        stack = samconfig.split(f"[{environment}.global.parameters]")[1].split('"')[1]
        assert f's3_prefix = "{stack}"' in section, environment


def test_the_deploy_role_may_publish_every_layer_of_the_stack_by_its_stack_prefixed_name():
    # Given the stack's own layers, by the names the template gives them (<stack>-<LogicalId>)
    layers = [r["Properties"]["LayerName"] for r in RESOURCES.values() if r["Type"] == "AWS::Lambda::LayerVersion"]
    assert layers
    # When the deploy role's layer statements are read
    publishable = [r["Fn::Sub"] for s in granted("lambda:PublishLayerVersion") for r in as_list(s["Resource"])]
    # Then each layer, and its versions, may be published, and every layer name starts with the stack's
    prefix = "arn:${AWS::Partition}:lambda:${AWS::Region}:${AWS::AccountId}:layer:"
    for name in layers:
        arn = prefix + name["Fn::Sub"].replace("${AWS::StackName}", "${StackName}")
        assert name["Fn::Sub"].startswith("${AWS::StackName}-"), name
        assert any(fnmatch.fnmatch(arn + suffix, p) for p in publishable for suffix in ("", ":3")), name


# IAM actions the deploy role may call without the boundary condition: none writes what a role may do, and none
# has iam:PermissionsBoundary in its request context (so the condition would never match).
IAM_WITHOUT_BOUNDARY = {"iam:GetRole", "iam:GetRolePolicy", "iam:DeleteRole", "iam:TagRole", "iam:UntagRole",
                        "iam:PassRole", "iam:GetPolicy", "iam:ListRoles"}  # fmt: skip


def test_every_iam_action_the_role_may_call_carries_the_boundary_condition_or_grants_nothing():
    # Given every IAM action of every Allow
    for statement in ALLOWS:
        for action in as_list(statement["Action"]):
            if not action.startswith("iam:"):
                continue
            # Then it requires the stack's boundary on the role, or is a listed action that grants nothing
            condition = statement.get("Condition", {}).get("StringEquals", {}).get("iam:PermissionsBoundary")
            assert condition == {"Fn::Sub": BOUNDARY_ARN} or action in IAM_WITHOUT_BOUNDARY, action
            # And names only the stack's own roles, by their path (or the stack's boundary, read only); only
            # iam:ListRoles, which has no resource type, is on "*"
            if statement["Resource"] == "*":
                assert action == "iam:ListRoles", action
                continue
            resource = statement["Resource"]["Fn::Sub"]
            assert resource.endswith((":role/${StackName}/*", ":policy/boundaries/${StackName}-permissions-boundary"))


def test_no_policy_version_can_be_written_and_the_stack_has_no_managed_policy():
    # Given the actions that would widen every role a managed policy is attached to
    for action in ("iam:CreatePolicy", "iam:CreatePolicyVersion", "iam:SetDefaultPolicyVersion"):
        # Then no Allow grants them, and a Deny refuses them on every policy
        assert not granted(action), action
        assert any(action in as_list(s["Action"]) and s["Resource"] == "*" for s in DENIES), action
    # And the stack's own policies are inline (PutRolePolicy, only on bounded roles)
    assert not of_type("AWS::IAM::ManagedPolicy")


def test_resource_policies_only_as_the_template_writes_them():
    # Given the Allows that write a function's resource policy or its URL
    adds = granted("lambda:AddPermission")
    urls = granted("lambda:CreateFunctionUrlConfig") + granted("lambda:UpdateFunctionUrlConfig")
    # Then each names its principal (lambda:Principal) on functions of the stack: "*" only on McpServer's alias and
    # the authorization server (both public by design), EventBridge only on ProbeDispatcher, and the IAM callers'
    # principal (IamCallerPrincipal, as the role is given it) only on McpServer's alias "iam"
    principals = {
        json.dumps(s["Condition"]["StringEquals"]["lambda:Principal"]): {
            r["Fn::Sub"].split(":function:")[1] for r in resources(s)
        }
        for s in adds
    }
    assert principals['"*"'] == {"${StackName}-McpServer-*:live", "${StackName}-AuthorizationServer-*"}
    assert principals['"events.amazonaws.com"'] == {"${StackName}-ProbeDispatcher-*"}
    assert principals['{"Ref": "IamCallerPrincipal"}'] == {"${StackName}-McpServer-*:iam"}
    # And a Function URL with auth type NONE on those two (the template's public URLs), AWS_IAM on the alias "iam"
    functions_by_auth_type = {
        statement["Condition"]["StringEquals"]["lambda:FunctionUrlAuthType"]: {
            r["Fn::Sub"].split(":function:")[1] for r in resources(statement)
        }
        for statement in urls
    }
    assert functions_by_auth_type == {
        "NONE": {"${StackName}-McpServer-*", "${StackName}-AuthorizationServer-*"},
        "AWS_IAM": {"${StackName}-McpServer-*:iam"},
    }
    assert {url["Properties"]["AuthType"] for url in of_type("AWS::Lambda::Url").values()} == {"NONE", "AWS_IAM"}
    # And what the template asks for matches: its permissions' principals are exactly these
    permissions = of_type("AWS::Lambda::Permission").values()
    assert {json.dumps(p["Properties"]["Principal"]) for p in permissions} == set(principals)


def test_the_stack_name_is_short_enough_that_generated_names_keep_it_whole():
    # Given the longest role name CloudFormation generates for the stack (<stack>-<LogicalId>-<12-char suffix>,
    # IAM's limit 64), with the longest stack name the role template accepts
    pattern = ROLE_TEMPLATE["Parameters"]["StackName"]["AllowedPattern"]
    assert BOUNDARY_TEMPLATE["Parameters"]["StackName"]["AllowedPattern"] == pattern
    longest = int(pattern.split(",")[1].split("}")[0]) + 1
    names = [logical_id for logical_id in of_type("AWS::IAM::Role")] + list(of_type("AWS::Lambda::Function"))
    # Then it fits without truncating the stack name, so every `<stack>-*` pattern still matches it
    assert max(longest + 1 + len(name) + 1 + 12 for name in names) <= 64


def resolved_size(template: dict[str, Any], document: Any, **parameters: str) -> int:
    """A policy's size as IAM counts it (no whitespace), for the longest stack name and region name."""
    defaults = {name: spec.get("Default", "") for name, spec in template["Parameters"].items()}
    scope = Scope(
        parameters={
            **defaults,
            "StackName": "s" * 24,
            "GitHubRepository": "o" * 39 + "/" + "r" * 100,
            **parameters,
        },
        mappings={},
        conditions=template.get("Conditions", {}),
        region="ap-southeast-3",
        account_id="123456789012",
        stack_name="deploy-role",
    )
    return len(json.dumps(scope.resolve(document), separators=(",", ":")))


@pytest.mark.parametrize("policy", sorted(DEPLOY_POLICIES))
def test_each_deploy_policy_fits_a_managed_policy(policy):
    # IAM's quota for a managed policy: 6,144 characters, whitespace not counted
    # (https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_iam-quotas.html)
    assert resolved_size(ROLE_TEMPLATE, DEPLOY_POLICIES[policy]) <= 6144


@pytest.mark.parametrize("bucket", ["", "b" * 63], ids=["no dataset bucket", "the longest bucket name"])
def test_the_boundary_fits_a_managed_policy_and_the_role_has_no_inline_policy(bucket):
    # Given the boundary for the longest stack name, without a dataset bucket and with one of S3's longest names
    # (63 characters: https://docs.aws.amazon.com/AmazonS3/latest/userguide/bucketnamingrules.html)
    # Then it fits IAM's 6,144 characters either way
    assert resolved_size(BOUNDARY_TEMPLATE, BOUNDARY["PolicyDocument"], DatasetBucketName=bucket) <= 6144
    assert "Policies" not in ROLE_TEMPLATE["Resources"]["DeployRole"]["Properties"]


NAMED = {
    "AWS::Lambda::Function": "lambda:UpdateFunctionCode",
    "AWS::SQS::Queue": "sqs:DeleteQueue",
    "AWS::DynamoDB::Table": "dynamodb:DeleteTable",
    "AWS::SNS::Topic": "sns:DeleteTopic",
    "AWS::Kinesis::Stream": "kinesis:DeleteStream",
    "AWS::CloudWatch::Alarm": "cloudwatch:DeleteAlarms",
    "AWS::Events::Rule": "events:DeleteRule",
}


def test_every_generated_name_of_the_stack_matches_a_stem_of_the_deploy_role():
    # Given each resource whose name CloudFormation generates (<stack>-<LogicalId>-<suffix>)
    for logical_id, resource in RESOURCES.items():
        if resource["Type"] not in NAMED:
            continue
        # Then the role's statement for it names a stem its logical id begins with
        patterns = [r["Fn::Sub"] for s in granted(NAMED[resource["Type"]]) for r in as_list(s["Resource"])]
        stems = [p.split("${StackName}-")[1].rstrip("*") for p in patterns if "${StackName}-" in p]
        assert any(f"{logical_id}-".startswith(stem) and stem[:1].isupper() for stem in stems), (logical_id, stems)


@pytest.mark.parametrize(
    ("sid", "alias", "name"),
    [
        ("EndpointTokens", "EndpointTokenKeyAlias", "endpoint-tokens"),
        ("AccessTokenSigning", "AuthorizationSigningKeyAlias", "token-signing"),
    ],
)
def test_the_boundary_limits_each_direct_key_use_to_the_stacks_key_alias(sid, alias, name):
    # Given a boundary statement for a key the functions call directly (its id is random)
    [statement] = [s for s in boundary_allows() if s["Sid"] == sid]
    # Then it names the key by the stack's alias (unique in the account and Region), the alias the template
    # creates, and no tag (anyone allowed to tag a key could meet a tag condition)
    assert statement["Condition"]["ForAnyValue:StringEquals"]["kms:ResourceAliases"] == {
        "Fn::Sub": f"alias/${{StackName}}-{name}"
    }
    assert RESOURCES[alias]["Properties"]["AliasName"] == {"Fn::Sub": f"alias/${{AWS::StackName}}-{name}"}
    assert "aws:ResourceTag" not in json.dumps(statement)
