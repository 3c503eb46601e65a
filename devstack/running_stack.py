"""Where a running `make dev` says it is: `make invoke`, `make fire`, `make token` and `make redrive`
find the stack's endpoints in one small file, and believe it only if the stack answers."""

from __future__ import annotations

import json

import httpx

from devstack.stack.template import ROOT

RUNNING_FILE = ROOT / ".devstack" / "running.json"
SAM_ENV_FILE = ROOT / ".devstack" / "sam-env.json"  # `make env-json`: the --env-vars file for `sam local invoke`


def announce(aws_url: str, lambda_url: str) -> None:
    RUNNING_FILE.parent.mkdir(exist_ok=True)
    RUNNING_FILE.write_text(json.dumps({"aws": aws_url, "lambda": lambda_url}))


def withdraw() -> None:
    RUNNING_FILE.unlink(missing_ok=True)


def running_stack() -> dict[str, str] | None:
    """The running `make dev` stack's endpoints, if one answers."""
    if not RUNNING_FILE.exists():
        return None
    endpoints = json.loads(RUNNING_FILE.read_text())
    try:
        httpx.get(f"{endpoints['lambda']}/devstack/health", timeout=2).raise_for_status()
    except httpx.HTTPError:
        return None
    return endpoints
