"""The deploy role, the permissions boundary, every function role and the resource policies, evaluated together
by an IAM policy evaluator (tests/iam/simulator.py: @cloud-copilot/iam-simulate), for stacks `mcp` and
`mcp-prod` in one account:

- every escalation path from the deploy role ends denied;
- neither stack's deploy role, nor any role bounded by its boundary, can act on the other stack's resources;
- every AWS call each function makes is allowed by its role with the boundary and the resource's policy, and the
  grants no listed call uses are printed and each is justified here.

The calls are a list these tests maintain (`function_calls`), each beside the code that makes it;
tests/functions/test_recorded_calls_are_listed.py records what the functions call on the local stack and fails on
any action the list lacks.

Encryption context: iam-simulate's request validation does not recognise KMS's `kms:EncryptionContext:<key>`
(its matcher knows variable keys only as prefix/name) and drops them, so a condition on them would see the key
missing. tests/iam/simulator/simulate.mjs evaluates such a request again with the context as given (the engine's
unvalidated entry point), and `decisions` fails on any context key dropped all the same: every condition of the
key policy and the boundary, encryption context included, is evaluated here
(`test_each_use_of_the_endpoint_token_key_needs_its_encryption_context`). The context the calls carry is the
one the code binds (EndpointTokenCipher.context)."""

from __future__ import annotations

import fnmatch
from typing import Any

import pytest

from mcp_backend.probes.endpoint_tokens import EndpointTokenCipher
from mcp_backend.probes.registry import SELF_OWNER_ID, SELF_SERVER_ID
from tests.iam.simulator import SIMULATOR_DIR, Request, decide
from tests.iam.stacks import ACCOUNT, REGION, TEMPLATE, Stack
from tests.node_packages import installed_node
from tests.profiles import profile_parameters

DEV, PROD = Stack("mcp"), Stack("mcp-prod")
# A stack that reads tenants' s3:// datasets (the local stack has such a bucket): its functions' calls include it.
DATASETS = {"DatasetBucketName": "mcp-tenant-datasets"}
# The stack's own authorization server, signing users in at the stack's pool, or at another provider whose
# client secret is the stack's <stack>/upstream-... secret.
BUILTIN = {"AuthMode": "oauth", "AuthorizationServerMode": "builtin"}
BUILTIN_UPSTREAM = {
    **BUILTIN,
    "UpstreamIssuer": "https://idp.example",
    "UpstreamClientId": "as-client",
    "UpstreamClientSecretArn": f"arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:mcp/upstream-client-AbCdEf",
}
# The durable worker, on the job pipeline of the default parameters; its stack, and another stack's.
DURABLE = {"DurableWorker": "Enabled"}
DURABLE_STACK, OTHER_DURABLE_STACK = Stack("mcp", DURABLE), Stack("mcp-prod", DURABLE)
ADMIN = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}
ADMINISTRATOR_ACCESS = "arn:aws:iam::aws:policy/AdministratorAccess"
# KMS's default key policy: the account's IAM policies decide who uses the key.
KEY_POLICY_OF_THE_ACCOUNT = {
    "Version": "2012-10-17",
    "Statement": [
        {"Effect": "Allow", "Principal": {"AWS": f"arn:aws:iam::{ACCOUNT}:root"}, "Action": "kms:*", "Resource": "*"}
    ],
}
ALLOWED = "Allowed"


@pytest.fixture(scope="module")
def node():
    return installed_node(SIMULATOR_DIR)


def as_deployer(stack: Stack, action: str, resource: str, **context: Any) -> Request:
    """A call by the stack's GitHub deploy role (no boundary: it is created by an administrator)."""
    return Request(
        stack.deploy_role_arn,
        action,
        resource,
        {"aws:PrincipalArn": stack.deploy_role_arn, **context},
        tuple(stack.deploy_role_policies),
        resource_policy=resource_policy_of(stack, resource),
    )


def as_bounded_admin(stack: Stack, action: str, resource: str, **context: Any) -> Request:
    """A call by a role the deploy role wrote with `"Action": "*"`, bounded as it must be by the stack's boundary
    (on a KMS key, one whose policy leaves every decision to IAM: the boundary alone must keep it out)."""
    principal = f"arn:aws:iam::{ACCOUNT}:role/{stack.name}/{stack.name}-Escalated-ABCDEF"
    key_policy = KEY_POLICY_OF_THE_ACCOUNT if resource.startswith("arn:aws:kms:") else None
    return Request(
        principal, action, resource, {"aws:PrincipalArn": principal, **context}, (ADMIN,), stack.boundary, key_policy
    )


def resource_policy_of(stack: Stack, resource: str) -> dict[str, Any] | None:
    for other in (stack, DEV, PROD):
        for logical_id, found in other.resources.items():
            if found["Type"] in ("AWS::KMS::Key", "AWS::SQS::Queue", "AWS::S3::Bucket") and resource.startswith(
                other.arn(logical_id)
            ):
                return other.resource_policy(logical_id)
    return None


def decisions(node, requests: list[Request]) -> list[str]:
    """Each request's decision, every context key of it evaluated (a key the evaluator dropped would make a
    condition on it see the key missing: the test would prove nothing about that condition)."""
    found = decide(node, requests)
    dropped = {
        f"{r.action} {key}" for r, d in zip(requests, found, strict=True) for key in d.get("ignoredContextKeys", [])
    }
    assert dropped == set()
    return [decision["decision"] for decision in found]


# ---------------------------------------------------------------- (a) escalation paths from the deploy role
def escalations(stack: Stack) -> dict[str, Request]:
    role = f"arn:aws:iam::{ACCOUNT}:role/{stack.name}/{stack.name}-McpServerRole-A1"
    other = PROD if stack is DEV else DEV
    key = stack.arn("EndpointTokenKey")
    via_cloudformation = {"aws:CalledVia": ["cloudformation.amazonaws.com"]}
    return {
        "CreateRole without a boundary": as_deployer(stack, "iam:CreateRole", role),
        "CreateRole with AdministratorAccess as boundary": as_deployer(
            stack, "iam:CreateRole", role, **{"iam:PermissionsBoundary": ADMINISTRATOR_ACCESS}
        ),
        "CreateRole with the other stack's boundary": as_deployer(
            stack, "iam:CreateRole", role, **{"iam:PermissionsBoundary": other.boundary_arn}
        ),
        "CreateRole outside the stack's path": as_deployer(
            stack,
            "iam:CreateRole",
            f"arn:aws:iam::{ACCOUNT}:role/{stack.name}-Escalated",
            **{"iam:PermissionsBoundary": stack.boundary_arn},
        ),
        "PutRolePolicy on a role bounded otherwise": as_deployer(
            stack, "iam:PutRolePolicy", role, **{"iam:PermissionsBoundary": ADMINISTRATOR_ACCESS}
        ),
        "AttachRolePolicy AdministratorAccess": as_deployer(
            stack,
            "iam:AttachRolePolicy",
            role,
            **{"iam:PermissionsBoundary": stack.boundary_arn, "iam:PolicyARN": ADMINISTRATOR_ACCESS},
        ),
        "CreatePolicyVersion of a stack-named policy": as_deployer(
            stack, "iam:CreatePolicyVersion", f"arn:aws:iam::{ACCOUNT}:policy/{stack.name}-CallLogTelemetryWriter-A1"
        ),
        "SetDefaultPolicyVersion of a stack-named policy": as_deployer(
            stack, "iam:SetDefaultPolicyVersion", f"arn:aws:iam::{ACCOUNT}:policy/{stack.name}-Writer-A1"
        ),
        "CreatePolicyVersion of the boundary": as_deployer(stack, "iam:CreatePolicyVersion", stack.boundary_arn),
        "DeleteRolePermissionsBoundary": as_deployer(
            stack, "iam:DeleteRolePermissionsBoundary", role, **{"iam:PermissionsBoundary": stack.boundary_arn}
        ),
        "UpdateAssumeRolePolicy": as_deployer(stack, "iam:UpdateAssumeRolePolicy", role),
        "PassRole to EC2": as_deployer(stack, "iam:PassRole", role, **{"iam:PassedToService": "ec2.amazonaws.com"}),
        "PassRole of the other stack's role": as_deployer(
            stack, "iam:PassRole", other.arn("McpServerRole"), **{"iam:PassedToService": "lambda.amazonaws.com"}
        ),
        "AddPermission to * on ToolWorker": as_deployer(
            stack, "lambda:AddPermission", stack.arn("ToolWorker"), **{"lambda:Principal": "*"}
        ),
        "AddPermission to * on McpServer itself (not its alias)": as_deployer(
            stack, "lambda:AddPermission", stack.arn("McpServer"), **{"lambda:Principal": "*"}
        ),
        "AddPermission to another account on McpServer's alias": as_deployer(
            stack, "lambda:AddPermission", f"{stack.arn('McpServer')}:live", **{"lambda:Principal": "999999999999"}
        ),
        "a public Function URL on ToolWorker": as_deployer(
            stack, "lambda:CreateFunctionUrlConfig", stack.arn("ToolWorker"), **{"lambda:FunctionUrlAuthType": "NONE"}
        ),
        "PutKeyPolicy on the endpoint-token key directly": as_deployer(stack, "kms:PutKeyPolicy", key),
        "CreateGrant on the endpoint-token key, even through CloudFormation": as_deployer(
            stack, "kms:CreateGrant", key, **via_cloudformation
        ),
        "Decrypt with the endpoint-token key": as_deployer(stack, "kms:Decrypt", key, **via_cloudformation),
        "a layer of the other stack in a function": as_deployer(
            stack, "lambda:GetLayerVersion", other.arn("SharedLayer61034d32ca")
        ),
        "retagging its pool as the other stack's (whose boundary trusts the tag)": as_deployer(
            stack,
            "cognito-idp:TagResource",
            Stack(stack.name, BUILTIN).arn("McpUserPool"),
            **{"aws:ResourceTag/mcp-backend-stack": stack.name, "aws:RequestTag/mcp-backend-stack": other.name},
        ),
        "tagging the other stack's pool": as_deployer(
            stack,
            "cognito-idp:TagResource",
            Stack(other.name, BUILTIN).arn("McpUserPool"),
            **{"aws:ResourceTag/mcp-backend-stack": other.name, "aws:RequestTag/mcp-backend-stack": stack.name},
        ),
        "an import change set (adopting any resource)": as_deployer(
            stack,
            "cloudformation:CreateChangeSet",
            f"arn:aws:cloudformation:{REGION}:{ACCOUNT}:stack/{stack.name}/guid",
            **{"cloudformation:ImportResourceTypes": ["AWS::IAM::Role"]},
        ),
    }


# What the deploy role must still be able to do, so the denials above are the policies' and not the evaluator's.
def deploys(stack: Stack) -> dict[str, Request]:
    role = f"arn:aws:iam::{ACCOUNT}:role/{stack.name}/{stack.name}-McpServerRole-A1"
    bounded = {"iam:PermissionsBoundary": stack.boundary_arn}
    return {
        "CreateRole with the stack's boundary": as_deployer(stack, "iam:CreateRole", role, **bounded),
        "PutRolePolicy on a bounded role": as_deployer(stack, "iam:PutRolePolicy", role, **bounded),
        "PassRole to Lambda": as_deployer(
            stack, "iam:PassRole", role, **{"iam:PassedToService": "lambda.amazonaws.com"}
        ),
        "UpdateFunctionCode": as_deployer(stack, "lambda:UpdateFunctionCode", stack.arn("McpServer")),
        "the public URL permission on McpServer's alias": as_deployer(
            stack, "lambda:AddPermission", f"{stack.arn('McpServer')}:live", **{"lambda:Principal": "*"}
        ),
        "the public URL on McpServer's alias": as_deployer(
            stack,
            "lambda:CreateFunctionUrlConfig",
            f"{stack.arn('McpServer')}:live",
            **{"lambda:FunctionUrlAuthType": "NONE"},
        ),
        "EventBridge's permission on ProbeDispatcher": as_deployer(
            stack, "lambda:AddPermission", stack.arn("ProbeDispatcher"), **{"lambda:Principal": "events.amazonaws.com"}
        ),
        "its own layer": as_deployer(stack, "lambda:PublishLayerVersion", stack.arn("SharedLayer61034d32ca")[:-2]),
        "make verify-deployed's reads": as_deployer(stack, "iam:ListRoles", "*"),
        "make verify-deployed's key policy read": as_deployer(stack, "kms:GetKeyPolicy", stack.arn("EndpointTokenKey")),
        "make verify-deployed's URL read": as_deployer(stack, "lambda:GetFunctionUrlConfig", stack.arn("McpServer")),
        "tagging its pool": as_deployer(
            stack,
            "cognito-idp:TagResource",
            Stack(stack.name, BUILTIN).arn("McpUserPool"),
            **{"aws:ResourceTag/mcp-backend-stack": stack.name, "aws:RequestTag/mcp-backend-stack": stack.name},
        ),
        "the endpoint-token key's policy, through CloudFormation": as_deployer(
            stack,
            "kms:PutKeyPolicy",
            stack.arn("EndpointTokenKey"),
            **{"aws:CalledVia": ["cloudformation.amazonaws.com"]},
        ),
    }


@pytest.mark.parametrize("stack", [DEV, PROD], ids=lambda s: s.name)
def test_every_escalation_path_from_the_deploy_role_ends_denied(node, stack):
    # Given the paths by which a deploy session could become more than the stack's deployer
    paths = escalations(stack)
    # When IAM evaluates each with the role's policies and the resource's own policy
    found = dict(zip(paths, decisions(node, list(paths.values())), strict=True))
    # Then each is denied, explicitly or for want of an allow
    assert {path: decision for path, decision in found.items() if decision != "ExplicitlyDenied"} == {
        path: "ImplicitlyDenied" for path, decision in found.items() if decision != "ExplicitlyDenied"
    }
    # And what a deploy needs is still allowed (the denials are the policies', not the evaluator's)
    needed = deploys(stack)
    assert dict(zip(needed, decisions(node, list(needed.values())), strict=True)) == dict.fromkeys(needed, ALLOWED)


def test_the_deploy_role_may_attach_every_managed_policy_sam_attaches_to_a_role(node):
    # Given every AWS-managed policy SAM puts on a function role of the expanded template (under any condition)
    attached = sorted(
        {
            str(arn)
            for resource in TEMPLATE.expanded["Resources"].values()
            if resource["Type"] == "AWS::IAM::Role"
            for arn in resource["Properties"].get("ManagedPolicyArns", [])
        }
    )
    role = f"arn:aws:iam::{ACCOUNT}:role/{DEV.name}/{DEV.name}-ToolWorkerRole-A1"
    requests = [
        as_deployer(
            DEV, "iam:AttachRolePolicy", role, **{"iam:PermissionsBoundary": DEV.boundary_arn, "iam:PolicyARN": arn}
        )
        for arn in attached
    ]
    # When IAM evaluates the deploy role attaching each, to a role bounded by the stack's boundary
    found = dict(zip(attached, decisions(node, requests), strict=True))
    # Then each is allowed: a policy SAM attaches that the role refuses fails the deploy at the role's creation
    assert found == dict.fromkeys(attached, ALLOWED)


# ---------------------------------------------------------------- stack-exclusive scope
def deployer_actions(stack: Stack) -> list[tuple[str, str, dict[str, Any]]]:
    """(action, ARN, context) for a real ARN of each kind of resource of the stack, as its deploy role acts on it."""
    found: list[tuple[str, str, dict[str, Any]]] = []
    per_type = {
        "AWS::Lambda::Function": ["lambda:UpdateFunctionCode", "lambda:DeleteFunction"],
        "AWS::Lambda::LayerVersion": ["lambda:DeleteLayerVersion", "lambda:GetLayerVersion"],
        "AWS::DynamoDB::Table": ["dynamodb:DeleteTable"],
        "AWS::SQS::Queue": ["sqs:DeleteQueue", "sqs:SetQueueAttributes"],
        "AWS::SNS::Topic": ["sns:DeleteTopic", "sns:SetTopicAttributes"],
        "AWS::Kinesis::Stream": ["kinesis:DeleteStream"],
        "AWS::S3::Bucket": ["s3:DeleteBucket", "s3:PutBucketPolicy"],
        "AWS::SecretsManager::Secret": ["secretsmanager:PutSecretValue", "secretsmanager:DeleteSecret"],
        "AWS::CloudWatch::Alarm": ["cloudwatch:DeleteAlarms"],
        "AWS::Events::Rule": ["events:PutTargets"],
        "AWS::Logs::LogGroup": ["logs:DeleteLogGroup"],
        "AWS::SSM::Parameter": ["ssm:PutParameter", "ssm:DeleteParameter"],
    }
    for logical_id, resource in stack.resources.items():
        for action in per_type.get(resource["Type"], []):
            found.append((action, stack.arn(logical_id), {}))
        if resource["Type"] == "AWS::IAM::Role":
            arn = stack.arn(logical_id)
            found.append(("iam:PassRole", arn, {"iam:PassedToService": "lambda.amazonaws.com"}))
            found.append(("iam:PutRolePolicy", arn, {"iam:PermissionsBoundary": stack.boundary_arn}))
            found.append(("iam:DeleteRole", arn, {}))
    for topic in ("AlertTopic", "ProbeResultTopic"):  # a subscription's actions are authorised on its topic
        found.append(("sns:Unsubscribe", stack.arn(topic), {}))
        found.append(("sns:SetSubscriptionAttributes", stack.arn(topic), {}))
    found.append(("lambda:AddPermission", f"{stack.arn('McpServer')}:live", {"lambda:Principal": "*"}))
    found.append(("codedeploy:CreateDeployment", codedeploy_group(stack), {}))
    found.append(("kms:CreateAlias", stack.arn("EndpointTokenKeyAlias"), {}))
    if "AuthorizationServer" in stack.resources:  # its signing key's alias, the stack's pool (by its tag)
        found.append(("kms:CreateAlias", stack.arn("AuthorizationSigningKeyAlias"), {}))
        found.append(("cognito-idp:DeleteUserPool", stack.arn("McpUserPool"), stack.resource_tags("McpUserPool")))
    return found


def codedeploy_group(stack: Stack) -> str:
    application = f"{stack.name}-ServerlessDeploymentApplication-A1B2C3"
    return (
        f"arn:aws:codedeploy:{REGION}:{ACCOUNT}:deploymentgroup:{application}/{stack.name}-McpServerDeploymentGroup-X"
    )


def runtime_actions(stack: Stack) -> list[tuple[str, str, dict[str, Any]]]:
    """(action, ARN, context) a role bounded by another stack's boundary would need to reach this stack's data."""
    arn = stack.arn
    found: list[tuple[str, str, dict[str, Any]]] = [
        ("dynamodb:GetItem", arn("JobTable"), {}),
        ("dynamodb:PutItem", arn("MonitorTable"), {}),
        ("sqs:SendMessage", arn("JobQueue"), {}),
        ("kinesis:PutRecords", arn("CallLogStream"), {}),
        ("sns:Publish", arn("AlertTopic"), {}),
        ("secretsmanager:GetSecretValue", arn("ApiKeysSecret"), {}),
        ("lambda:InvokeFunction", arn("ProbeWorker"), {}),
        ("s3:GetObject", f"{arn('JobResultBucket')}/results/job-1.json", {}),
        ("logs:PutLogEvents", f"{arn('McpServerLogGroup')}:log-stream:x", {}),
    ]
    if "AuthorizationServer" in stack.resources:
        found += [
            ("dynamodb:GetItem", arn("AuthorizationTable"), {}),
            (
                "kms:Sign",
                arn("AuthorizationSigningKey"),
                {"kms:ResourceAliases": stack.key_aliases("AuthorizationSigningKey")},
            ),
            ("ssm:GetParameter", arn("AuthorizationLoginClientId"), {}),
            ("logs:PutLogEvents", f"{arn('AuthorizationServerLogGroup')}:log-stream:x", {}),
        ]
    return found


@pytest.mark.parametrize(
    ("actor", "target"),
    [(DEV, PROD), (PROD, DEV), (Stack("mcp", BUILTIN), Stack("mcp-prod", BUILTIN))],
    ids=["mcp->mcp-prod", "mcp-prod->mcp", "with the authorization server: mcp->mcp-prod"],
)
def test_neither_stacks_roles_can_act_on_the_others_resources(node, actor, target):
    # Given two stacks in one account, one named with the other's name and a hyphen as its prefix
    theirs = deployer_actions(target)
    ours = deployer_actions(actor)
    requests = [as_deployer(actor, action, arn, **context) for action, arn, context in theirs + ours]
    requests += [
        as_bounded_admin(actor, action, arn, **context)
        for action, arn, context in runtime_actions(target) + runtime_actions(actor)
    ]
    # When IAM evaluates the actor's deploy role, and an all-powerful role bounded by the actor's boundary
    found = decisions(node, requests)
    deployer = found[: len(theirs + ours)]
    bounded = found[len(theirs + ours) :]
    # Then nothing of the other stack is allowed, while the same calls on the actor's own resources are
    crossing = {f"{a} {arn}": d for (a, arn, _), d in zip(theirs, deployer[: len(theirs)], strict=True) if d == ALLOWED}
    assert crossing == {}
    own = {f"{a} {arn}": d for (a, arn, _), d in zip(ours, deployer[len(theirs) :], strict=True) if d != ALLOWED}
    assert own == {}
    theirs_runtime, ours_runtime = bounded[: len(runtime_actions(target))], bounded[len(runtime_actions(target)) :]
    assert [a for (a, _, _), d in zip(runtime_actions(target), theirs_runtime, strict=True) if d == ALLOWED] == []
    assert [a for (a, _, _), d in zip(runtime_actions(actor), ours_runtime, strict=True) if d != ALLOWED] == []


def test_a_bounded_role_signs_only_with_the_key_behind_its_stacks_alias(node):
    # Given an all-powerful role bounded by the stack's boundary, the stack's signing key, and a key someone
    # else tagged as the stack's (any principal allowed to tag a key can), both with KMS's default key policy
    # (the account's IAM policies decide)
    stack = Stack("mcp", BUILTIN)
    own = stack.arn("AuthorizationSigningKey")
    aliases = {"kms:ResourceAliases": stack.key_aliases("AuthorizationSigningKey")}
    tagged = {"aws:ResourceTag/mcp-backend-stack": "mcp", "aws:ResourceTag/aws:cloudformation:stack-name": "mcp"}
    other = f"arn:aws:kms:{REGION}:{ACCOUNT}:key/00000000-1111-4222-8333-444444444444"
    requests = [
        as_bounded_admin(stack, "kms:Sign", resource, **context)
        for resource, context in ((own, aliases), (other, tagged), (other, {"kms:ResourceAliases": ["alias/mcp-x"]}))
    ]
    # When IAM evaluates a Sign with each
    found = decisions(node, requests)
    # Then only the stack's key signs: a tag, or an alias of another name, meets no condition of the boundary
    assert found == [ALLOWED, "ImplicitlyDenied", "ImplicitlyDenied"]


# ---------------------------------------------------------------- the endpoint-token key
def test_no_principal_but_probe_worker_can_decrypt_or_grant_with_the_endpoint_token_key(node):
    # Given an administrator of the account (identity "*" on "*", no boundary) and the stack's own roles
    key = DEV.arn("EndpointTokenKey")
    policy = DEV.resource_policy("EndpointTokenKey")
    admin = f"arn:aws:iam::{ACCOUNT}:role/Administrator"

    def call(principal: str, action: str, identity: tuple = (ADMIN,), boundary: Any = None) -> Request:
        context = {"aws:PrincipalArn": principal, "kms:EncryptionContextKeys": ["serverId", "ownerId"]}
        return Request(principal, action, key, context, identity, boundary, policy)

    requests = [
        call(admin, "kms:Decrypt"),
        call(admin, "kms:CreateGrant"),
        call(admin, "kms:ReEncryptFrom"),
        call(DEV.arn("McpServerRole"), "kms:Decrypt", (), DEV.boundary),
        call(DEV.deploy_role_arn, "kms:Decrypt", tuple(DEV.deploy_role_policies)),
        call(DEV.arn("ProbeWorkerRole"), "kms:CreateGrant", (ADMIN,), DEV.boundary),
    ]
    # When IAM evaluates them with the key policy
    found = decisions(node, requests)
    # Then the key policy's Deny refuses each: no IAM policy can grant decryption or a grant
    assert found == ["ExplicitlyDenied"] * len(requests)
    # And ProbeWorker's decryption, with the context the code binds, is allowed
    probe_worker = DEV.arn("ProbeWorkerRole")
    opened = Request(
        probe_worker,
        "kms:Decrypt",
        key,
        {"aws:PrincipalArn": probe_worker, **sealed_with(DEV, "srv-1", "apikey:alice")},
        (),
        DEV.boundary,
        policy,
    )
    assert decisions(node, [opened]) == [ALLOWED]


def test_each_use_of_the_endpoint_token_key_needs_its_encryption_context(node):
    # Given the calls the key policy allows, each with a context the code does not bind for that caller
    def use(role: str, action: str, context: dict[str, Any]) -> Request:
        principal = DEV.arn(role)
        return Request(
            principal,
            "kms:" + action,
            DEV.arn("EndpointTokenKey"),
            {"aws:PrincipalArn": principal, "kms:ResourceAliases": DEV.key_aliases("EndpointTokenKey"), **context},
            tuple(DEV.role_policies(role)),
            DEV.boundary,
            DEV.resource_policy("EndpointTokenKey"),
        )

    server_only = {"kms:EncryptionContext:serverId": "srv-1"}
    refused = {
        "McpServer sealing the stack's own endpoint": use(
            "McpServerRole", "Encrypt", sealed_with(DEV, "srv-1", "stack")
        ),
        "McpServer sealing without a context": use("McpServerRole", "Encrypt", {}),
        "SelfProbeKeyIssuer sealing a user's endpoint": use(
            "SelfProbeKeyIssuerRole", "Encrypt", sealed_with(DEV, "srv-1", "apikey:alice")
        ),
        "ProbeWorker opening without a context": use("ProbeWorkerRole", "Decrypt", {}),
        "ProbeWorker opening without an owner": use("ProbeWorkerRole", "Decrypt", server_only),
    }
    # When IAM evaluates them with the key policy and the boundary, the encryption context conditions included
    found = dict(zip(refused, decisions(node, list(refused.values())), strict=True))
    # Then none is allowed: the context is part of each grant, not a label
    assert {use: decision for use, decision in found.items() if decision == ALLOWED} == {}


def test_the_key_policy_names_each_use_with_its_context():
    statements = {s["Sid"]: s for s in DEV.resource_policy("EndpointTokenKey")["Statement"]}
    assert statements["OnlyProbeWorkerOpensTokens"]["Principal"] == {"AWS": DEV.arn("ProbeWorkerRole")}
    assert statements["OnlyProbeWorkerDecrypts"]["Condition"] == {
        "ArnNotEquals": {"aws:PrincipalArn": DEV.arn("ProbeWorkerRole")}
    }
    administer = statements["AccountAdministersTheKey"]["Action"]
    assert not [a for a in administer if fnmatch.fnmatch("kms:CreateGrant", a) or fnmatch.fnmatch("kms:Decrypt", a)]
    assert not [a for a in administer if "*" in a]


# ---------------------------------------------------------------- every KMS key, one rule
# A stack that creates every key the template declares (the signing key and the alarm topic's key are optional).
EVERY_KEY = Stack("mcp", {**BUILTIN, "AlarmEmail": "ops@example.com"})


def use_of(key_id: str) -> str:
    """What a holder of the key could do with it: sign with a signing key, decrypt with any other."""
    return "kms:Sign" if EVERY_KEY.resources[key_id]["Properties"].get("KeyUsage") == "SIGN_VERIFY" else "kms:Decrypt"


def intended_users(key_id: str) -> set[str]:
    """The principals the key policy itself allows the key's use (a role ARN, or a service principal)."""
    found: set[str] = set()
    for statement in EVERY_KEY.resource_policy(key_id)["Statement"]:
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        if statement["Effect"] == "Allow" and any(fnmatch.fnmatch(use_of(key_id), a) for a in actions):
            for principals in statement["Principal"].values():
                found.update(principals if isinstance(principals, list) else [principals])
    return found


def key_ids() -> list[str]:
    return sorted(k for k, r in EVERY_KEY.resources.items() if r["Type"] == "AWS::KMS::Key")


def test_the_key_rule_covers_every_key_of_the_template():
    # Given the expanded template's keys, and those of a stack with every optional part
    declared = sorted(k for k, r in TEMPLATE.expanded["Resources"].items() if r["Type"] == "AWS::KMS::Key")
    # Then that stack creates each of them: the rule below is checked on every key
    assert key_ids() == declared and len(declared) >= 3


@pytest.mark.parametrize("key_id", key_ids())
def test_no_principal_but_a_keys_intended_users_can_use_it_or_grant_it(node, key_id):
    # Given the key, its policy, and principals who are not its intended users: an administrator of the account,
    # roles whose IAM policies hold kms:CreateGrant, or kms:*, on "*", the account root, the deploy role, and
    # every role of the stack (each with "*" on "*", no boundary) but the key's own users
    key, policy, use = EVERY_KEY.arn(key_id), EVERY_KEY.resource_policy(key_id), use_of(key_id)
    intended = intended_users(key_id)
    assert intended and not [p for p in intended if p.endswith(":root")]

    def holding(*actions: str) -> dict[str, Any]:
        return {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": list(actions), "Resource": "*"}]}

    others = {
        f"arn:aws:iam::{ACCOUNT}:role/Administrator": (ADMIN,),
        f"arn:aws:iam::{ACCOUNT}:role/KeyGranter": (holding("kms:CreateGrant"),),
        f"arn:aws:iam::{ACCOUNT}:role/KeyUser": (holding("kms:*"),),
        f"arn:aws:iam::{ACCOUNT}:root": (),
        EVERY_KEY.deploy_role_arn: tuple(EVERY_KEY.deploy_role_policies),
        **{EVERY_KEY.arn(role): (ADMIN,) for role in set(EVERY_KEY.function_roles.values())},
    }
    others = {principal: identity for principal, identity in others.items() if principal not in intended}
    aliases = {"kms:ResourceAliases": EVERY_KEY.key_aliases(key_id)}
    context = {  # each request as KMS sees it: a decryption with a context, a grant of the key's use
        use: {**aliases, **({"kms:EncryptionContextKeys": ["serverId", "ownerId"]} if use == "kms:Decrypt" else {})},
        "kms:CreateGrant": {**aliases, "kms:GrantOperations": [use]},
    }

    def call(principal: str, action: str, identity: tuple) -> Request:
        return Request(
            principal, action, key, {"aws:PrincipalArn": principal, **context[action]}, identity, None, policy
        )

    requests = [call(principal, action, identity) for principal, identity in others.items() for action in context]
    # And the intended users asking for a grant of the use
    requests += [call(user, "kms:CreateGrant", (ADMIN,)) for user in sorted(intended) if user.startswith("arn:")]
    # When IAM evaluates each with the key policy
    found = decisions(node, requests)
    # Then the key policy's Deny refuses every one: no IAM policy, and no grant, can open the key to them
    assert {
        f"{r.principal} {r.action}": d for r, d in zip(requests, found, strict=True) if d != "ExplicitlyDenied"
    } == {}


def test_the_account_root_administers_every_key_but_cannot_use_or_grant_it():
    # Given each key's statement for the account root (so the key is never unmanageable)
    lists = {}
    for key_id in key_ids():
        statements = {s["Sid"]: s for s in EVERY_KEY.resource_policy(key_id)["Statement"]}
        administer = lists[key_id] = statements["AccountAdministersTheKey"]["Action"]
        # Then it names each action (no wildcard), keeps the key policy and deletion with the account, and
        # covers neither the key's use nor grants
        assert not [a for a in administer if "*" in a], key_id
        assert {"kms:PutKeyPolicy", "kms:ScheduleKeyDeletion", "kms:DescribeKey"} <= set(administer), key_id
        assert not [a for a in administer for u in (use_of(key_id), "kms:CreateGrant") if fnmatch.fnmatch(u, a)]
    # And every key has the same list: one rule
    assert len({tuple(sorted(actions)) for actions in lists.values()}) == 1, lists


def test_cloudwatch_still_publishes_to_the_encrypted_alarm_topic(node):
    # Given CloudWatch's service principal calling KMS for an alarm of this account, as it does to publish
    key, policy = EVERY_KEY.arn("OpsAlarmKey"), EVERY_KEY.resource_policy("OpsAlarmKey")
    service = "cloudwatch.amazonaws.com"
    context = {"aws:PrincipalServiceName": service, "aws:SourceAccount": ACCOUNT}
    requests = [
        Request(service, action, key, context, (), None, policy) for action in ("kms:Decrypt", "kms:GenerateDataKey")
    ]
    # When IAM evaluates them with the key policy
    # Then both are allowed: the Deny spares only that service
    assert decisions(node, requests) == [ALLOWED, ALLOWED]


# ---------------------------------------------------------------- (b), (c) every function's calls
Call = tuple[str, str, dict[str, Any]]  # (action, ARN, request context)


def function_calls(stack: Stack) -> dict[str, list[Call]]:
    """Each function's AWS calls: (action, ARN, request context), with the code that makes each."""
    arn = stack.arn
    poll = ["sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes"]  # Lambda's SQS poller
    idempotency: list[Call] = [  # powertools idempotency (the DynamoDB persistence layer)
        (action, arn("IdempotencyTable"), {})
        for action in ("dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem")
    ]
    stream = f"{arn('MonitorTable')}/stream/2026-01-01T00:00:00.000"
    monitor_stream: list[Call] = [  # Lambda's DynamoDB Streams poller
        ("dynamodb:DescribeStream", stream, {}),
        ("dynamodb:GetRecords", stream, {}),
        ("dynamodb:GetShardIterator", stream, {}),
        ("dynamodb:ListStreams", "*", {}),  # no resource type
    ]
    call_log: Call = ("kinesis:PutRecords", arn("CallLogStream"), {})  # mcp_backend/calllog/writer.py

    def endpoint_token(action: str, server_id: str, owner_id: str) -> Call:  # probes/endpoint_tokens.py
        return ("kms:" + action, arn("EndpointTokenKey"), sealed_with(stack, server_id, owner_id))

    bucket = stack.parameters.get("DatasetBucketName")
    datasets: list[Call] = (  # tools/fetch.py: an s3:// dataset under the caller's prefix
        [("s3:GetObject", f"arn:aws:s3:::{bucket}/apikey%3Aalice/sales.csv", {})] if bucket else []
    )
    calls = {
        "McpServer": [
            *[(a, arn("JobTable"), {}) for a in ("dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem")],
            ("dynamodb:BatchGetItem", arn("JobTable"), {}),  # jobs/store.py: a refused submission's slot holders
            ("dynamodb:Query", f"{arn('JobTable')}/index/FailedJobsByUser", {}),  # list_failed_jobs
            ("dynamodb:Query", f"{arn('JobTable')}/index/JobsByUser", {}),  # resources/list, completion
            ("sqs:SendMessage", arn("JobQueue"), {}),  # jobs/queue.py
            call_log,
            ("secretsmanager:GetSecretValue", arn("ApiKeysSecret"), {}),  # api_keys.py
            ("secretsmanager:GetSecretValue", arn("RequestStateSecret"), {}),  # mcp/request_state_key.py
            *[(a, arn("MonitorTable"), {}) for a in ("dynamodb:GetItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem")],
            ("dynamodb:Query", arn("MonitorTable"), {}),  # monitor/table.py: probe results of an endpoint
            ("dynamodb:Query", f"{arn('MonitorTable')}/index/EndpointsByOwner", {}),
            ("dynamodb:UpdateItem", arn("RateLimitTable"), {}),  # request_rate.py, call_slots.py
            ("s3:GetObject", f"{arn('JobResultBucket')}/results/job-1.json", {}),  # jobs/results.py
            endpoint_token("Encrypt", "srv-1", "apikey:alice"),  # register_endpoint: a user's endpoint
            *datasets,
        ],
        "ToolWorker": [
            *[(a, arn("JobQueue"), {}) for a in poll],
            ("dynamodb:GetItem", arn("JobTable"), {}),
            ("dynamodb:UpdateItem", arn("JobTable"), {}),  # claim, end (TransactWriteItems: per item action)
            ("s3:PutObject", f"{arn('JobResultBucket')}/results/job-1.json", {}),
            call_log,
            ("sqs:SendMessage", arn("JobDeadLetterQueue"), {}),  # a permanent failure, with its reason
            *datasets,
        ],
        "DurableToolWorker": [
            ("dynamodb:GetItem", arn("JobTable"), {}),
            ("dynamodb:UpdateItem", arn("JobTable"), {}),  # progress per step, the end (and the owner's slot)
            ("s3:PutObject", f"{arn('JobResultBucket')}/results/job-1.json", {}),
            *datasets,
            # the durable execution SDK: each step's checkpoint, the state a replay starts from
            ("lambda:CheckpointDurableExecution", stack.durable_execution("DurableToolWorker"), {}),
            ("lambda:GetDurableExecutionState", stack.durable_execution("DurableToolWorker"), {}),
        ],
        "CallLogAnalyzer": [
            *[
                (a, arn("CallLogStream"), {})
                for a in (
                    "kinesis:DescribeStream",
                    "kinesis:DescribeStreamSummary",
                    "kinesis:GetRecords",
                    "kinesis:GetShardIterator",
                    "kinesis:ListShards",
                )
            ],
            *idempotency,
            ("sns:Publish", arn("AlertTopic"), {}),  # calllog/analyzer.py
            ("dynamodb:UpdateItem", arn("AlertWindowTable"), {}),  # calllog/alert_windows.py: one alert per window
            ("sqs:SendMessage", arn("CallLogFailureQueue"), {}),  # the mapping's OnFailure destination
        ],
        "DriftDetector": [
            *monitor_stream,
            ("dynamodb:GetItem", arn("MonitorTable"), {}),
            ("dynamodb:UpdateItem", arn("MonitorTable"), {}),
            *idempotency,
            call_log,
            ("sqs:SendMessage", arn("MonitorStreamFailureQueue"), {}),
        ],
        "ExpiryRollup": [
            *monitor_stream,
            ("dynamodb:UpdateItem", arn("MonitorTable"), {}),
            *idempotency,
            ("sqs:SendMessage", arn("MonitorStreamFailureQueue"), {}),
        ],
        "ProbeDispatcher": [
            ("lambda:InvokeFunction", arn("ProbeWorker"), {}),  # probes/dispatcher.py
            ("dynamodb:Query", f"{arn('MonitorTable')}/index/RegisteredEndpoints", {}),
            ("dynamodb:UpdateItem", arn("MonitorTable"), {}),
            call_log,
        ],
        "SelfProbeKeyIssuer": [
            ("lambda:GetFunctionUrlConfig", f"{arn('McpServer')}:live", {}),  # probes/self_probe.py
            *[
                (a, arn("ApiKeysSecret"), {})
                for a in (
                    "secretsmanager:GetSecretValue",
                    "secretsmanager:PutSecretValue",
                    "secretsmanager:UpdateSecretVersionStage",
                )
            ],
            ("dynamodb:UpdateItem", arn("MonitorTable"), {"dynamodb:LeadingKeys": ["self"]}),
            ("dynamodb:DeleteItem", arn("MonitorTable"), {"dynamodb:LeadingKeys": ["owner#stack"]}),
            endpoint_token("Encrypt", SELF_SERVER_ID, SELF_OWNER_ID),  # probes/self_probe.py
        ],
        "ProbeWorker": [
            ("sns:Publish", arn("ProbeResultTopic"), {}),  # the OnSuccess destination
            ("sqs:SendMessage", arn("ProbeFailureQueue"), {}),  # the OnFailure destination
            ("dynamodb:GetItem", arn("MonitorTable"), {}),
            ("dynamodb:UpdateItem", arn("MonitorTable"), {}),
            endpoint_token("Decrypt", "srv-1", "apikey:alice"),  # probes/worker.py: the endpoint's token
            endpoint_token("Decrypt", SELF_SERVER_ID, SELF_OWNER_ID),
        ],
        "ProbeRecorder": [
            ("dynamodb:BatchWriteItem", arn("MonitorTable"), {}),
            *[(a, arn("ProbeResultQueue"), {}) for a in poll],
        ],
        "AlertHandler": [
            *idempotency,
            ("sns:Publish", arn("AlertTopic"), {}),  # probes/alerts.py
            *[(a, arn(queue), {}) for queue in ("ProbeAlertQueue", "ProbeFailureQueue") for a in poll],
        ],
    }
    if "DurableToolWorker" in stack.resources:
        # a long job starts a durable execution of the worker's alias; cancel_job stops it
        calls["ToolWorker"].append(("lambda:InvokeFunction", arn("DurableToolWorkerAliaslive"), {}))
        execution = stack.durable_execution("DurableToolWorker")
        calls["McpServer"] += [
            ("lambda:StopDurableExecution", execution, {}),  # jobs/service.py: cancel_job
            ("lambda:SendDurableExecutionCallbackSuccess", execution, {}),  # jobs/service.py: a user's answer
        ]
    if "AuthorizationServer" in stack.resources:
        calls["AuthorizationServer"] = authorization_server_calls(stack)
        # stack_urls.py: the endpoint's own URL, the audience the server's tokens name
        calls["McpServer"].append(("ssm:GetParameter", arn("AuthorizationEndpointResource"), {}))
    for function, found in calls.items():  # the Lambda runtime, for every function
        log_group = f"arn:aws:logs:{REGION}:{ACCOUNT}:log-group:/aws/lambda/{stack.physical_name(function)}"
        found += [
            ("logs:CreateLogStream", f"{log_group}:log-stream:x", {}),
            ("logs:PutLogEvents", f"{log_group}:log-stream:x", {}),
        ]
        found += [("xray:PutTraceSegments", "*", {}), ("xray:PutTelemetryRecords", "*", {})]
    if stack.parameters.get("Tracing") == "xray":  # mcp_backend/tracing/otlp_export.py: spans to X-Ray's OTLP endpoint
        for function in TRACED_FUNCTIONS:
            calls.setdefault(function, []).append(("xray:PutSpans", "*", {}))
    return without_absent_parts(stack, calls)


# The kinds of resource a part that is off takes away, and which the remaining functions would otherwise call.
PART_STORES = ("AWS::DynamoDB::Table", "AWS::SQS::Queue", "AWS::Kinesis::Stream", "AWS::S3::Bucket", "AWS::KMS::Key")


def without_absent_parts(stack: Stack, calls: dict[str, list[Call]]) -> dict[str, list[Call]]:
    """A part that is off (docs/deploy.md "Profiles") has no functions, and nothing calls its stores: their
    variables are unset, so the code reaches for none of them."""
    absent = [
        stack.arn(logical_id)
        for logical_id, resource in TEMPLATE.expanded["Resources"].items()
        if resource["Type"] in PART_STORES and logical_id not in stack.resources
    ]

    def on_absent(resource: str) -> bool:
        return any(resource == arn or resource.startswith((f"{arn}/", f"{arn}:")) for arn in absent)

    return {
        function: [call for call in found if not on_absent(call[1])]
        for function, found in calls.items()
        if function in stack.resources
    }


def sealed_with(stack: Stack, server_id: str, owner_id: str) -> dict[str, Any]:
    """A request on the endpoint-token key as KMS sees it: the key's aliases and the encryption context the code
    binds (EndpointTokenCipher.context), one kms:EncryptionContext:<key> per pair
    (https://docs.aws.amazon.com/kms/latest/developerguide/conditions-kms.html#conditions-kms-encryption-context)."""
    context = EndpointTokenCipher.context(server_id, owner_id)
    return {
        "kms:ResourceAliases": stack.key_aliases("EndpointTokenKey"),
        "kms:EncryptionContextKeys": sorted(context),
        **{f"kms:EncryptionContext:{key}": value for key, value in context.items()},
    }


def authorization_server_calls(stack: Stack) -> list[Call]:
    """AuthorizationServer's calls (mcp_backend/authorization): its records, its signing key, and the upstream
    login's client id and the re-check of each refresh (the stack's pool) or client secret (another provider's),
    whichever the stack has."""
    arn = stack.arn
    signing_key = arn("AuthorizationSigningKey")
    on_the_key = {"kms:ResourceAliases": stack.key_aliases("AuthorizationSigningKey")}
    calls: list[Call] = [
        *[
            (action, arn("AuthorizationTable"), {})  # store.py: one item per record, conditional updates
            for action in ("dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem")
        ],
        ("kms:Sign", signing_key, on_the_key),  # signing.py: each access token
        ("kms:GetPublicKey", signing_key, on_the_key),  # signing.py: the JWKS
        ("ssm:GetParameter", arn("AuthorizationEndpointResource"), {}),  # resource.py: the endpoint's URL
        ("ssm:GetParameter", arn("AuthorizationIssuer"), {}),  # resource.py: its own URL, the issuer
    ]
    if "AuthorizationLoginClientId" in stack.resources:  # upstream.py: the pool's login client's id
        calls.append(("ssm:GetParameter", arn("AuthorizationLoginClientId"), {}))
        # upstream.py: each refresh checks the pool's user again (enabled, groups)
        pool, tags = arn("McpUserPool"), stack.resource_tags("McpUserPool")
        calls += [(a, pool, tags) for a in ("cognito-idp:AdminGetUser", "cognito-idp:AdminListGroupsForUser")]
    secret = stack.parameters.get("UpstreamClientSecretArn")
    if secret:  # upstream.py: the upstream client's secret, read once
        calls.append(("secretsmanager:GetSecretValue", secret, {}))
    return calls


TRACED_FUNCTIONS = ("McpServer", "ToolWorker", "DurableToolWorker", "ProbeDispatcher", "ProbeWorker", "ProbeRecorder")
TRACING_TO_XRAY = {
    "Tracing": "xray",
    "TracingSdkLayerArn": "arn:aws:lambda:us-east-1:123456789012:layer:opentelemetry-sdk:1",
}


# Grants no listed call uses, and why each stays (c).
VPC_ACCESS = (
    "AWSLambdaVPCAccessExecutionRole (SAM attaches it for Globals VpcConfig); Lambda manages the ENIs with it when"
    " VpcSubnetIds is set"
)
UNUSED_AND_WHY = {
    "logs:CreateLogGroup": "AWSLambdaBasicExecutionRole (SAM attaches it); the template creates every log group",
    "xray:GetSamplingRules": "AWSXrayWriteOnlyAccess (Tracing: Active); sampling rules are the X-Ray SDK's",
    "xray:GetSamplingTargets": "AWSXrayWriteOnlyAccess (Tracing: Active); sampling rules are the X-Ray SDK's",
    "xray:GetSamplingStatisticSummaries": "AWSXrayWriteOnlyAccess (Tracing: Active)",
    "ec2:CreateNetworkInterface": VPC_ACCESS,
    "ec2:DescribeNetworkInterfaces": VPC_ACCESS,
    "ec2:DescribeSubnets": VPC_ACCESS,
    "ec2:DeleteNetworkInterface": VPC_ACCESS,
    "ec2:AssignPrivateIpAddresses": VPC_ACCESS,
    "ec2:UnassignPrivateIpAddresses": VPC_ACCESS,
}


@pytest.mark.parametrize(
    "parameters",
    [
        {},
        DATASETS,
        BUILTIN,
        BUILTIN_UPSTREAM,
        {**DATASETS, **TRACING_TO_XRAY},
        {**DATASETS, **DURABLE},
        {**DATASETS, **DURABLE, **TRACING_TO_XRAY},
        {**DATASETS, **profile_parameters("minimal")},
        {**DATASETS, **profile_parameters("full"), "JobPipeline": "Disabled"},
    ],
    ids=[
        "no dataset bucket",
        "a dataset bucket",
        "the authorization server",
        "it with another provider",
        "tracing to X-Ray",
        "the durable worker",
        "it traced to X-Ray",
        "the minimal profile",
        "no job pipeline",
    ],
)
def test_every_call_each_function_makes_is_allowed_by_its_role_the_boundary_and_the_resource_policy(node, parameters):
    # Given each function's calls, as its role makes them, with the stack's boundary and the resource's policy
    stack = Stack("mcp", parameters)
    roles = stack.function_roles
    cases = [
        (function, action, resource)
        for function, calls in function_calls(stack).items()
        for action, resource, _ in calls
    ]
    requests = [
        Request(
            stack.arn(roles[function]),
            action,
            resource,
            {"aws:PrincipalArn": stack.arn(roles[function]), **context},
            tuple(stack.role_policies(roles[function])),
            stack.boundary,
            resource_policy_of(stack, resource),
        )
        for function, calls in function_calls(stack).items()
        for action, resource, context in calls
    ]
    # When IAM evaluates them
    found = decisions(node, requests)
    # Then every one is allowed: an AccessDenied shows up here, before the first deploy
    denied = [f"{f} {a} {r}: {d}" for (f, a, r), d in zip(cases, found, strict=True) if d != ALLOWED]
    assert denied == [], "\n".join(denied)


def test_every_grant_of_a_function_role_is_used_by_a_listed_call_or_justified(capsys):
    # Given each function role's granted actions and the calls its function makes, in each kind of stack
    unused: dict[str, set[str]] = {}
    for stack in (Stack("mcp", DATASETS), Stack("mcp", BUILTIN), Stack("mcp", BUILTIN_UPSTREAM), DURABLE_STACK):
        for function, calls in function_calls(stack).items():
            called = {action.lower() for action, _, _ in calls}
            for document in stack.role_policies(stack.function_roles[function]):
                for statement in document["Statement"]:
                    actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
                    for action in actions:
                        if action.lower() not in called:
                            unused.setdefault(action, set()).add(function)
    # Then the unused ones are listed (pytest -s shows them) and each is justified in UNUSED_AND_WHY
    with capsys.disabled():
        for action, functions in sorted(unused.items()):
            print(
                f"\nunused grant {action} ({', '.join(sorted(functions))}): {UNUSED_AND_WHY.get(action, 'UNJUSTIFIED')}"
            )
    assert set(unused) == set(UNUSED_AND_WHY)


# ---------------------------------------------------------------- the durable worker
def as_role(stack: Stack, function: str, action: str, resource: str) -> Request:
    """A call by a function's role: its identity policies, the stack's boundary, the resource's own policy."""
    role = stack.arn(stack.function_roles[function])
    return Request(
        role,
        action,
        resource,
        {"aws:PrincipalArn": role},
        tuple(stack.role_policies(stack.function_roles[function])),
        stack.boundary,
        resource_policy_of(stack, resource),
    )


def test_the_durable_worker_checkpoints_only_its_own_executions(node):
    # Given the durable worker's role (SAM's AWSLambdaBasicDurableExecutionRolePolicy grants checkpointing on "*")
    stack, other = DURABLE_STACK, OTHER_DURABLE_STACK
    targets = {
        "its own execution": stack.durable_execution("DurableToolWorker"),
        "an execution of ToolWorker": stack.durable_execution("ToolWorker"),
        "the other stack's durable worker": other.durable_execution("DurableToolWorker"),
        "a function of another account": "arn:aws:lambda:us-east-1:999999999999:function:"
        "mcp-DurableToolWorker-A:1/durable-execution/job-1/x",
    }
    actions = ("lambda:CheckpointDurableExecution", "lambda:GetDurableExecutionState")
    requests = [as_role(stack, "DurableToolWorker", a, arn) for arn in targets.values() for a in actions]
    # When IAM evaluates each checkpoint and state read
    found = decisions(node, requests)
    # Then only its own executions are allowed: the boundary holds the managed policy's "*" to this function
    allowed = {
        name for (name, _), d in zip([(n, a) for n in targets for a in actions], found, strict=True) if d == ALLOWED
    }
    assert allowed == {"its own execution"}
    assert found[:2] == [ALLOWED, ALLOWED]


def test_tool_worker_invokes_only_the_durable_workers_alias(node):
    # Given ToolWorker's role and the durable worker's ARNs: the alias, the function, a version, $LATEST
    stack = DURABLE_STACK
    function = stack.arn("DurableToolWorker")
    targets = {
        "the alias live": stack.arn("DurableToolWorkerAliaslive"),
        "the unqualified function": function,
        "version 1": f"{function}:1",
        "$LATEST": f"{function}:$LATEST",
        "the other stack's alias": OTHER_DURABLE_STACK.arn("DurableToolWorkerAliaslive"),
        "McpServer": stack.arn("McpServer"),
    }
    # When IAM evaluates an Invoke of each
    found = decisions(node, [as_role(stack, "ToolWorker", "lambda:InvokeFunction", arn) for arn in targets.values()])
    # Then the alias alone is allowed (durable functions are invoked by qualified ARN; the alias is the one kept)
    assert dict(zip(targets, found, strict=True)) == {
        name: ALLOWED if name == "the alias live" else "ImplicitlyDenied" for name in targets
    }


def test_the_endpoint_stops_only_the_durable_workers_executions(node):
    # Given McpServer's role (cancel_job) and executions of the durable worker, of another function, of another stack
    stack = DURABLE_STACK
    targets = {
        "the durable worker's": stack.durable_execution("DurableToolWorker"),
        "the durable worker's, another version": stack.durable_execution("DurableToolWorker").replace(":1/", ":7/"),
        "ToolWorker's": stack.durable_execution("ToolWorker"),
        "the other stack's durable worker's": OTHER_DURABLE_STACK.durable_execution("DurableToolWorker"),
    }
    actions = ("lambda:StopDurableExecution", "lambda:SendDurableExecutionCallbackSuccess")
    requests = [as_role(stack, "McpServer", a, arn) for arn in targets.values() for a in actions]
    # When IAM evaluates a stop and a callback's completion of each, and a checkpoint of the worker's own
    requests.append(as_role(stack, "McpServer", "lambda:CheckpointDurableExecution", targets["the durable worker's"]))
    found = decisions(node, requests)
    # Then it may stop, or answer, the durable worker's executions, whatever version they run on, and nothing else
    assert found == [ALLOWED] * 4 + ["ImplicitlyDenied"] * 5


def grants(stack: Stack) -> dict[str, set[tuple[str, str]]]:
    """Each function role's (action, resource) grants, as written (conditions applied)."""
    found: dict[str, set[tuple[str, str]]] = {}
    for function, role in stack.function_roles.items():
        found[function] = {
            (action, resource)
            for document in stack.role_policies(role)
            for statement in document["Statement"]
            for action in ([statement["Action"]] if isinstance(statement["Action"], str) else statement["Action"])
            for resource in (
                [statement["Resource"]] if isinstance(statement["Resource"], str) else statement["Resource"]
            )
        }
    return found


@pytest.mark.parametrize("parameters", [{}, DATASETS, TRACING_TO_XRAY], ids=["defaults", "datasets", "tracing"])
def test_the_durable_worker_adds_its_own_role_and_its_grants_to_tool_worker_and_the_endpoint(parameters):
    # Given the same stack without and with the durable worker
    off, on = grants(Stack("mcp", parameters)), grants(Stack("mcp", {**parameters, **DURABLE}))
    stack = Stack("mcp", {**parameters, **DURABLE})
    # Then no other function's role changes, and ToolWorker and McpServer gain exactly the calls they make of it
    assert set(on) - set(off) == {"DurableToolWorker"}
    assert {f: on[f] - off[f] for f in off if on[f] != off[f]} == {
        "ToolWorker": {("lambda:InvokeFunction", stack.arn("DurableToolWorkerAliaslive"))},
        "McpServer": {
            (action, f"{stack.arn('DurableToolWorker')}:*/durable-execution/*")
            for action in ("lambda:StopDurableExecution", "lambda:SendDurableExecutionCallbackSuccess")
        },
    }
    assert all(off[f] <= on[f] for f in off)
