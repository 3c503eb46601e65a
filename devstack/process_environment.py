"""The process-wide variables a running local stack sets, and puts back at its stop.

Why process-wide: in the in-process runtime the functions are imported into this process, and the MCP app is
served from a thread of it; their boto3 clients are built on first use (mcp_backend.aws), on any thread, from
the default credential chain and AWS_ENDPOINT_URL, as on Lambda. The test process and the developer's
commands (`make token`, the API-key CLI) build clients the same way. A function's own variables are applied
per invocation (devstack.runtime.in_process.function_environment); the endpoints and credentials must hold for
every thread at once, for the stack's lifetime, so they are set once here. The Lambda runtime's sandboxes get
them explicitly and do not read this process's environment.
"""

from __future__ import annotations

import os

LOCAL_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local", "AWS_SESSION_TOKEN": "local"}
STACK_VARIABLES = (
    *LOCAL_CREDENTIALS,
    "AWS_DEFAULT_REGION",
    "AWS_REGION",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_LAMBDA",
)


class ProcessEnvironment:
    """Points this process's AWS clients at the local stack, and restores what it replaced."""

    def __init__(self) -> None:
        self._saved: dict[str, str | None] = {}

    def point_at(self, aws_url: str, lambda_url: str, region: str) -> None:
        self._saved = {name: os.environ.get(name) for name in STACK_VARIABLES}
        os.environ.update(
            {
                **LOCAL_CREDENTIALS,
                "AWS_DEFAULT_REGION": region,
                "AWS_REGION": region,
                "AWS_ENDPOINT_URL": aws_url,
                "AWS_ENDPOINT_URL_LAMBDA": lambda_url,
            }
        )

    def restore(self) -> None:
        for name, value in self._saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
