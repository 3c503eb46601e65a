"""Where a running `make dev` says it is: `make invoke`, `make fire`, `make token` and `make redrive`
find the stack's endpoints in one small file, and believe it only if the stack answers: its AWS endpoint and Lambda
Invoke API, the runtime its functions run in, and each served Function URL by the function behind it."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import httpx

from devstack.stack.template import ROOT

RUNNING_FILE = ROOT / ".devstack" / "running.json"
SAM_ENV_FILE = ROOT / ".devstack" / "sam-env.json"  # `make env-json`: the --env-vars file for `sam local invoke`


def running_file() -> Path:
    """The file a `make dev` announces itself in: `.devstack/running.json`, or the file DEVSTACK_RUNNING_FILE names
    (a test that runs its own stack beside others reads only its own)."""
    return Path(os.environ.get("DEVSTACK_RUNNING_FILE") or RUNNING_FILE)


def announce(aws_url: str, lambda_url: str, runtime: str = "inprocess", urls: dict[str, str] | None = None) -> None:
    running_file().parent.mkdir(exist_ok=True)
    running = {"aws": aws_url, "lambda": lambda_url, "runtime": runtime, "urls": urls or {}}
    running_file().write_text(json.dumps(running))


def withdraw() -> None:
    running_file().unlink(missing_ok=True)


def running_stack() -> dict[str, Any] | None:
    """The running `make dev` stack's endpoints, if one answers."""
    if not running_file().exists():
        return None
    endpoints = json.loads(running_file().read_text())
    try:
        httpx.get(f"{endpoints['lambda']}/devstack/health", timeout=2).raise_for_status()
    except httpx.HTTPError:
        return None
    return endpoints
