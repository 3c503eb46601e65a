"""Deploy-time helpers `make deploy-built` runs with the sam CLI's interpreter (standard library and boto3 only).

    deploy_parameters.py boundary <env> [<policy arn>]   the boundary to deploy with: the one given, else the
                                                          one the deployed stack already has (a deploy never
                                                          removes it), else none
    deploy_parameters.py overrides <env> KEY=VALUE...   samconfig's parameter_overrides for <env>, with these set
    deploy_parameters.py check-boundary <policy arn>     exit 2, naming the parameter, if no such managed policy

`sam deploy --parameter-overrides` replaces samconfig's overrides instead of adding to them, hence `overrides`.
A terminal `make deploy` without PERMISSIONS_BOUNDARY_ARN would otherwise strip the boundary from every role of
a stack CI deploys, and until CI's next deploy the deploy role could rewrite a stack policy those roles use.
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path
from typing import Any

import boto3
from botocore.exceptions import ClientError

SAMCONFIG = Path(__file__).resolve().parent.parent / "samconfig.toml"


def stack_name(environment: str) -> str:
    config = tomllib.loads(SAMCONFIG.read_text())
    return str(config[environment]["global"]["parameters"]["stack_name"])


def cloudformation_of(environment: str) -> Any:
    """A client where sam deploys the environment: its samconfig region and profile, else the caller's."""
    sections = tomllib.loads(SAMCONFIG.read_text())[environment]
    settings = {**sections.get("global", {}).get("parameters", {}), **sections["deploy"]["parameters"]}
    session = boto3.Session(profile_name=settings.get("profile"), region_name=settings.get("region"))
    return session.client("cloudformation")


def boundary(environment: str, given: str, cloudformation: Any = None) -> str:
    if given:
        return given
    client = cloudformation or cloudformation_of(environment)
    try:
        [stack] = client.describe_stacks(StackName=stack_name(environment))["Stacks"]
    except ClientError as error:
        if "does not exist" in str(error):
            return ""  # a first deploy: nothing to keep
        raise
    current = {p["ParameterKey"]: p.get("ParameterValue", "") for p in stack.get("Parameters", [])}
    return str(current.get("PermissionsBoundaryArn", ""))


def overrides(environment: str, extra: list[str]) -> str:
    config = tomllib.loads(SAMCONFIG.read_text())
    current = str(config[environment]["deploy"]["parameters"].get("parameter_overrides", ""))
    pairs = dict(item.split("=", 1) for item in current.split())
    pairs.update(item.split("=", 1) for item in extra)
    return " ".join(f"{key}={value}" for key, value in pairs.items())


def check_boundary(arn: str) -> int:
    iam = boto3.client("iam")
    try:
        iam.get_policy(PolicyArn=arn)
    except iam.exceptions.NoSuchEntityException:
        print(f"PermissionsBoundaryArn: no managed policy {arn} (deploy deploy/permissions-boundary.yaml first);"
              " nothing was deployed", file=sys.stderr)  # fmt: skip
        return 2
    except Exception as error:  # noqa: BLE001 - refused or unreachable: say which parameter could not be checked
        print(f"PermissionsBoundaryArn: {arn} could not be checked ({type(error).__name__}); nothing was deployed",
              file=sys.stderr)  # fmt: skip
        return 2
    return 0


def main(argv: list[str]) -> int:
    if len(argv) in (2, 3) and argv[0] == "boundary":
        print(boundary(argv[1], argv[2] if len(argv) == 3 else ""))
        return 0
    if len(argv) >= 2 and argv[0] == "overrides":
        print(overrides(argv[1], argv[2:]))
        return 0
    if len(argv) == 2 and argv[0] == "check-boundary":
        return check_boundary(argv[1])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
