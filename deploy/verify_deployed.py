"""After a deploy: the live stack's access policies are the template's, and nothing else reaches the stack.

    verify_deployed.py <env> <expanded template.json>     exit 1, listing each difference, if any

Compared, as grants (effect, principal, actions; a Function URL by its auth type): every role's trust policy,
every function's and alias's resource policy, every Function URL, the KMS key policies, the queue and bucket
policies. A principal is reduced to what the template can name: a service, "*", the account, one of the
stack's roles, or (only live) a foreign ARN, which never matches. Roles under the stack's path /<stack>/ that
the stack does not own (created by a deploy session outside CloudFormation) are differences too. Runs with
the sam CLI's interpreter (standard library and boto3 only); `make verify-deployed ENV=<env>`.
"""

from __future__ import annotations

import json
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
Grant = tuple[str, str, str]  # (effect, principal, sorted actions joined by ",")
Policies = dict[str, set[Grant]]  # "<kind> <LogicalId>" -> grants


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def principals(value: Any, roles: dict[str, str], account: str = "") -> Iterator[str]:
    """Each principal of a statement, reduced: service:<name>, *, account, role:<LogicalId>, or foreign:<arn>.

    `roles` maps a role's name (its ARN's last segment) to its logical id, and `account` is the stack's, for live
    ARNs (another account's root or role is foreign)."""
    if value == "*":
        yield "*"
        return
    for kind, entries in value.items():
        for entry in as_list(entries):
            if kind == "Service":
                yield f"service:{entry}"
            elif entry == "*":
                yield "*"
            elif isinstance(entry, dict) and "Fn::GetAtt" in entry:
                yield f"role:{as_list(entry['Fn::GetAtt'])[0].split('.')[0]}"
            elif isinstance(entry, dict) and str(entry.get("Fn::Sub", "")).endswith(":root"):
                yield "account"
            elif isinstance(entry, str) and entry.startswith("arn:") and entry.split(":")[4:] == [account, "root"]:
                yield "account"
            elif isinstance(entry, str) and f"::{account}:role/" in entry and entry.split("/")[-1] in roles:
                yield f"role:{roles[entry.split('/')[-1]]}"
            else:
                yield f"foreign:{kind}:{entry}"


def grants(document: Any, roles: dict[str, str], account: str = "") -> set[Grant]:
    found = set()
    for statement in as_list(document.get("Statement", [])):
        actions = ",".join(sorted(a.lower() for a in as_list(statement["Action"])))
        for principal in principals(statement.get("Principal", "*"), roles, account):
            found.add((statement["Effect"], principal, actions))
    return found


def permission_grant(principal: str, action: str, auth_type: str | None) -> Grant:
    return ("Allow", principal, f"{action.lower()}{'|url:' + auth_type if auth_type else ''}")


def target_of(expression: Any) -> str:
    """The logical id a FunctionName/TargetFunctionArn names (a function, or an alias)."""
    return str(expression.get("Ref") or as_list(expression.get("Fn::GetAtt"))[0]).split(".")[0]


def expected_policies(template: dict[str, Any]) -> Policies:
    resources = template["Resources"]
    expected: Policies = {}

    def add(key: str, found: set[Grant]) -> None:
        expected.setdefault(key, set()).update(found)

    for logical_id, resource in resources.items():
        kind, props = resource["Type"], resource.get("Properties", {})
        if kind == "AWS::IAM::Role":
            add(f"trust {logical_id}", grants(props["AssumeRolePolicyDocument"], {}))
        elif kind == "AWS::Lambda::Permission":
            principal = "*" if props["Principal"] == "*" else f"service:{props['Principal']}"
            grant = permission_grant(principal, props["Action"], props.get("FunctionUrlAuthType"))
            add(f"policy {target_of(props['FunctionName'])}", {grant})
        elif kind == "AWS::Lambda::Url":
            add(f"url {target_of(props['TargetFunctionArn'])}", {("Allow", "url", props["AuthType"])})
        elif kind == "AWS::KMS::Key":
            add(f"key {logical_id}", grants(props["KeyPolicy"], {}))
        elif kind == "AWS::SQS::QueuePolicy":
            for queue in props["Queues"]:
                add(f"queue {target_of(queue)}", grants(props["PolicyDocument"], {}))
        elif kind == "AWS::S3::BucketPolicy":
            add(f"bucket {target_of(props['Bucket'])}", grants(props["PolicyDocument"], {}))
    return expected


def differences(expected: Policies, live: Policies, owned: set[str]) -> list[str]:
    """What the live stack has that the template does not, and the other way round, per policy.

    `owned` is the logical ids the live stack has (a resource the template makes only under a condition may be
    absent); a live key no template resource names (a role outside the stack) is always a difference."""
    found = []
    for key in sorted(set(expected) | set(live)):
        logical_id = key.split(" ", 1)[1]
        if key not in live and logical_id not in owned:
            continue  # not created (a condition of the template); nothing live to compare
        now, wanted = live.get(key, set()), expected.get(key, set())
        extra, missing = now - wanted, wanted - now
        found += [f"{key}: live only {grant}" for grant in sorted(extra)]
        found += [f"{key}: template only {grant}" for grant in sorted(missing)]
    return found


def function_policies(lambda_: Any, logical: str, name: str, alias: bool, context: tuple[dict, str]) -> Policies:
    """A function's (or an alias's) resource policy and Function URL, as grants."""
    from botocore.exceptions import ClientError  # with boto3, only when talking to AWS

    function, _, qualifier = name.rpartition(":") if alias else (name, "", "")
    target = {"FunctionName": function, **({"Qualifier": qualifier} if qualifier else {})}
    try:
        statements = document(lambda_.get_policy(**target)["Policy"])["Statement"]
    except ClientError:
        statements = []  # no resource policy
    found: Policies = {}
    for statement in statements:
        auth = statement.get("Condition", {}).get("StringEquals", {}).get("lambda:FunctionUrlAuthType")
        for principal in principals(statement["Principal"], *context):
            found.setdefault(f"policy {logical}", set()).add(permission_grant(principal, statement["Action"], auth))
    try:  # the URL of the function itself, or of this alias
        url = lambda_.get_function_url_config(**target)
        found.setdefault(f"url {logical}", set()).add(("Allow", "url", url["AuthType"]))
    except ClientError:
        pass  # no Function URL here
    return found


def document(policy: Any) -> Any:
    """A policy as a dict: AWS returns JSON text (moto's CloudFormation-made key policies are dicts already)."""
    return json.loads(policy) if isinstance(policy, str) else policy


def resource_policy(session: Any, kind: str, name: str) -> Any:
    """A key's, queue's or bucket's policy document as AWS returns it; None where it has none."""
    from botocore.exceptions import ClientError

    try:
        if kind == "AWS::KMS::Key":
            return document(session.client("kms").get_key_policy(KeyId=name, PolicyName="default")["Policy"])
        if kind == "AWS::SQS::Queue":
            attributes = session.client("sqs").get_queue_attributes(QueueUrl=name, AttributeNames=["Policy"])
            policy = attributes.get("Attributes", {}).get("Policy")
            return document(policy) if policy else None
        return document(session.client("s3").get_bucket_policy(Bucket=name)["Policy"])
    except ClientError:
        return None  # no policy: the template's, if any, is then "template only"


POLICY_KINDS = {"AWS::KMS::Key": "key", "AWS::SQS::Queue": "queue", "AWS::S3::Bucket": "bucket"}


def live_policies(session: Any, stack: str) -> tuple[Policies, set[str]]:
    """The deployed stack's policies, keyed as expected_policies keys the template's."""
    cloudformation, iam, lambda_ = (session.client(name) for name in ("cloudformation", "iam", "lambda"))
    resources = [
        r
        for page in cloudformation.get_paginator("list_stack_resources").paginate(StackName=stack)
        for r in page["StackResourceSummaries"]
    ]
    physical = {r["LogicalResourceId"]: (r["ResourceType"], r.get("PhysicalResourceId", "")) for r in resources}
    roles = {name: logical for logical, (kind, name) in physical.items() if kind == "AWS::IAM::Role"}
    context = (roles, session.client("sts").get_caller_identity()["Account"])
    live: Policies = {}
    for page in iam.get_paginator("list_roles").paginate(PathPrefix=f"/{stack}/"):
        for role in page["Roles"]:
            logical = roles.get(role["RoleName"], f"outside-the-stack:{role['Arn']}")
            live[f"trust {logical}"] = grants(role["AssumeRolePolicyDocument"], *context)
    for logical, (kind, name) in physical.items():
        if kind in ("AWS::Lambda::Function", "AWS::Lambda::Alias"):
            live.update(function_policies(lambda_, logical, name, kind == "AWS::Lambda::Alias", context))
        elif kind in POLICY_KINDS and (policy := resource_policy(session, kind, name)) is not None:
            live[f"{POLICY_KINDS[kind]} {logical}"] = grants(policy, *context)
    return live, set(physical)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    import boto3  # the sam CLI's interpreter has it

    environment, template_path = argv
    config = tomllib.loads((ROOT / "samconfig.toml").read_text())[environment]
    settings = {**config.get("global", {}).get("parameters", {}), **config["deploy"]["parameters"]}
    session = boto3.Session(profile_name=settings.get("profile"), region_name=settings.get("region"))
    live, owned = live_policies(session, settings["stack_name"])
    found = differences(expected_policies(json.loads(Path(template_path).read_text())), live, owned)
    for line in found:
        print(f"verify-deployed: {line}", file=sys.stderr)
    print(f"verify-deployed: {len(found)} difference(s) between {settings['stack_name']} and the template")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
