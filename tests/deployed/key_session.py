"""`make smoke-deployed ENV=...`: the deployed-stack test with an API key that lives only as long as the run.

Reads the stack's McpServerUrl and ApiKeysSecretArn outputs, adds a key (user smoke-<id>, tier free), runs the
deployed-stack check (tests/deployed/smoke.py) with it, in this process, and revokes the key whatever happened
(the endpoint's key cache may accept it for up to ApiKeysCacheSeconds after). Exit status 1 on any failure.
It runs with the deploy role's credentials, so in the minimal environment tests/deployed/requirements.txt pins
(`make smoke-deployed`): no pytest, no plugins, nothing but what a deployed function has.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tomllib
import uuid
from pathlib import Path

import boto3

from mcp_backend.api_keys import add_api_key, hash_api_key, revoke_api_key
from tests.deployed.smoke import exercise, failures

ROOT = Path(__file__).resolve().parents[2]


def stack_name(environment: str) -> str:
    config = tomllib.loads((ROOT / "samconfig.toml").read_text())
    return str(config[environment]["global"]["parameters"]["stack_name"])


def outputs(stack: str) -> dict[str, str]:
    [description] = boto3.client("cloudformation").describe_stacks(StackName=stack)["Stacks"]
    return {output["OutputKey"]: output["OutputValue"] for output in description.get("Outputs", [])}


def main(environment: str) -> int:
    stack = stack_name(environment)
    found = outputs(stack)
    secrets = boto3.client("secretsmanager")
    secret_id = found["ApiKeysSecretArn"]
    key = add_api_key(secrets, secret_id, user_id=f"smoke-{uuid.uuid4().hex[:12]}", tier="free")
    try:
        found_failures = failures(
            *asyncio.run(exercise(found["McpServerUrl"], key, os.environ.get("MCP_SMOKE_DATASET", "")))
        )
    except Exception as error:  # any error fails the smoke, named by its type (no payload in the log)
        found_failures = [f"the check raised {type(error).__name__}"]
    finally:
        revoked = revoke_api_key(secrets, secret_id, hash_api_key(key))
        print(f"smoke key {'revoked' if revoked else 'was already gone'} from {stack}", file=sys.stderr)
    for failure in found_failures:
        print(f"smoke-deployed: {failure}", file=sys.stderr)
    print(f"smoke-deployed: {stack} {'FAILED' if found_failures else 'passed'}", file=sys.stderr)
    return 1 if found_failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "default"))
