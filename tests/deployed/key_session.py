"""`make smoke-deployed ENV=...`: the deployed-stack test with an API key that lives only as long as the run.

Reads the stack's McpServerUrl and ApiKeysSecretArn outputs, adds a key (user smoke-<id>, tier free), runs
tests/deployed with it and revokes it whatever happened (the endpoint's key cache may accept it for up to
ApiKeysCacheSeconds after). The exit status is pytest's; a skipped or empty run counts as a failure.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
import uuid
from pathlib import Path

import boto3

from mcp_backend.api_keys import add_api_key, hash_api_key, revoke_api_key

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
        env = {**os.environ, "MCP_SMOKE_URL": found["McpServerUrl"], "MCP_SMOKE_KEY": key}
        run = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", "tests/deployed"],
            cwd=ROOT,
            env=env,
            check=False,
        )
    finally:
        revoked = revoke_api_key(secrets, secret_id, hash_api_key(key))
        print(f"smoke key {'revoked' if revoked else 'was already gone'} from {stack}", file=sys.stderr)
    # pytest: 0 passed; 5 nothing collected. Skips are listed by -rs and fail here only if nothing ran.
    return run.returncode if run.returncode != 5 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "default"))
