"""Deploy-time checks `make deploy-built` runs with the sam CLI's interpreter (standard library and boto3 only).

    deploy_parameters.py preflight <env>          refuse a stack name that is not stack-exclusive, create the
                                                  stack's permissions boundary when it is missing, and print
                                                  samconfig's parameter_overrides for <env> with the boundary set
    deploy_parameters.py overrides <env> KEY=VALUE...   samconfig's parameter_overrides for <env>, with these set

Each refusal names the rule it applies and happens before anything of the stack is created.
`sam deploy --parameter-overrides` replaces samconfig's overrides instead of adding to them, hence `overrides`.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path
from typing import Any

import boto3
from botocore.exceptions import ClientError

ROOT = Path(__file__).resolve().parent.parent
SAMCONFIG = ROOT / "samconfig.toml"
BOUNDARY_TEMPLATE = ROOT / "deploy" / "permissions-boundary.yaml"
# CloudFormation's generated names keep the whole stack name up to this length (github-oidc-role.yaml StackName).
STACK_NAME = re.compile(r"[a-z][a-z0-9-]{0,23}")
# Every stack but the deleted ones (ListStacks' StackStatusFilter takes the statuses to list).
LIVE_STATUSES = [
    "CREATE_IN_PROGRESS", "CREATE_FAILED", "CREATE_COMPLETE", "ROLLBACK_IN_PROGRESS", "ROLLBACK_FAILED",
    "ROLLBACK_COMPLETE", "DELETE_IN_PROGRESS", "DELETE_FAILED", "UPDATE_IN_PROGRESS",
    "UPDATE_COMPLETE_CLEANUP_IN_PROGRESS", "UPDATE_COMPLETE", "UPDATE_FAILED", "UPDATE_ROLLBACK_IN_PROGRESS",
    "UPDATE_ROLLBACK_FAILED", "UPDATE_ROLLBACK_COMPLETE_CLEANUP_IN_PROGRESS", "UPDATE_ROLLBACK_COMPLETE",
    "REVIEW_IN_PROGRESS", "IMPORT_IN_PROGRESS", "IMPORT_COMPLETE", "IMPORT_ROLLBACK_IN_PROGRESS",
    "IMPORT_ROLLBACK_FAILED", "IMPORT_ROLLBACK_COMPLETE",
]  # fmt: skip


class Refused(Exception):
    """A deploy refused before anything is created; the message names the rule."""


def settings(environment: str) -> dict[str, Any]:
    sections = tomllib.loads(SAMCONFIG.read_text())[environment]
    return {**sections.get("global", {}).get("parameters", {}), **sections["deploy"]["parameters"]}


def stack_name(environment: str) -> str:
    config = tomllib.loads(SAMCONFIG.read_text())
    return str(config[environment]["global"]["parameters"]["stack_name"])


def session_of(environment: str) -> Any:
    """A session where sam deploys the environment: its samconfig region and profile, else the caller's."""
    found = settings(environment)
    return boto3.Session(profile_name=found.get("profile"), region_name=found.get("region"))


def boundary_arn(partition: str, account: str, stack: str) -> str:
    """The policy deploy/permissions-boundary.yaml creates for a stack (and the deploy role requires)."""
    return f"arn:{partition}:iam::{account}:policy/boundaries/{stack}-permissions-boundary"


def boundary_stack_name(stack: str) -> str:
    # Not <stack>-...: that would be prefixed by the stack's own name (StackNameExclusive).
    return f"boundary-{stack}"


def colliding(stack: str, others: list[str]) -> list[str]:
    """The other stacks named `<stack>-...`, or whose name followed by `-` begins this one's."""
    return sorted(o for o in others if o != stack and (o.startswith(f"{stack}-") or stack.startswith(f"{o}-")))


def check_stack_name(stack: str, cloudformation: Any) -> None:
    if not STACK_NAME.fullmatch(stack):
        raise Refused(
            f"StackNameShape: stack name {stack!r} must be 1 to 24 lower-case letters, digits and hyphens, starting"
            " with a letter (longer names are truncated in the names CloudFormation generates)"
        )
    names = [
        summary["StackName"]
        for page in cloudformation.get_paginator("list_stacks").paginate(StackStatusFilter=LIVE_STATUSES)
        for summary in page["StackSummaries"]
    ]
    if clashes := colliding(stack, names):
        raise Refused(
            f"StackNameExclusive: stack name {stack!r} is a hyphen-prefix of, or prefixed by, {', '.join(clashes)}"
            " in this account and region: their names share a prefix (the job-result bucket's lower-case name"
            " is matched by <stack>-jobresultbucket-*). Rename one (docs/deploy.md, one account per environment)"
        )


def dataset_bucket(environment: str) -> str:
    pairs = dict(item.split("=", 1) for item in str(settings(environment).get("parameter_overrides", "")).split())
    return pairs.get("DatasetBucketName", "")


def ensure_boundary(environment: str, session: Any) -> str:
    """The stack's boundary ARN, after creating deploy/permissions-boundary.yaml's stack if the policy is missing."""
    stack = stack_name(environment)
    caller = session.client("sts").get_caller_identity()
    arn = boundary_arn(caller["Arn"].split(":")[1], caller["Account"], stack)
    iam = session.client("iam")
    try:
        iam.get_policy(PolicyArn=arn)
        return arn
    except ClientError as error:
        code = error.response["Error"]["Code"]
        if code != "NoSuchEntity":
            raise Refused(f"PermissionsBoundaryRequired: {arn} could not be checked ({code})") from None
    cloudformation = session.client("cloudformation")
    name = boundary_stack_name(stack)
    print(f"creating the permissions boundary {arn} (stack {name})", file=sys.stderr)
    try:
        cloudformation.create_stack(
            StackName=name,
            TemplateBody=BOUNDARY_TEMPLATE.read_text(),
            Parameters=[
                {"ParameterKey": "StackName", "ParameterValue": stack},
                {"ParameterKey": "DatasetBucketName", "ParameterValue": dataset_bucket(environment)},
            ],
            Capabilities=["CAPABILITY_NAMED_IAM"],
            Tags=[{"Key": "project", "Value": "mcp-backend"}],
        )
        cloudformation.get_waiter("stack_create_complete").wait(StackName=name)
    except Exception as error:  # noqa: BLE001 - refused, or the stack failed: name the rule, not a traceback
        raise Refused(
            f"PermissionsBoundaryRequired: no policy {arn}, and creating stack {name} from"
            f" deploy/permissions-boundary.yaml failed ({type(error).__name__}); an administrator creates it once"
        ) from None
    return arn


def overrides(environment: str, extra: list[str]) -> str:
    current = str(settings(environment).get("parameter_overrides", ""))
    pairs = dict(item.split("=", 1) for item in current.split())
    pairs.update(item.split("=", 1) for item in extra)
    return " ".join(f"{key}={value}" for key, value in pairs.items())


def preflight(environment: str, session: Any) -> str:
    check_stack_name(stack_name(environment), session.client("cloudformation"))
    arn = ensure_boundary(environment, session)
    return overrides(environment, [f"PermissionsBoundaryArn={arn}"])


def main(argv: list[str]) -> int:
    try:
        if len(argv) == 2 and argv[0] == "preflight":
            print(preflight(argv[1], session_of(argv[1])))
            return 0
        if len(argv) >= 2 and argv[0] == "overrides":
            print(overrides(argv[1], argv[2:]))
            return 0
    except Refused as refusal:
        print(f"{refusal}; nothing was deployed", file=sys.stderr)
        return 2
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
