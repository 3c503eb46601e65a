"""The official MCP conformance suite (npm @modelcontextprotocol/conformance, pinned by
tests/e2e/conformance/package-lock.json) run against the endpoint on loopback, with the template's tables on moto
and the fixtures its scenarios call by name (devstack/conformance_fixtures.py: resources and prompts). Every
scenario of its active suite runs; the ones this server is expected to fail are listed, each with its reason, in
tests/e2e/conformance/baseline.yml. A new failure fails the test, and so does a listed scenario that passes."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import boto3
import pytest
from starlette.types import ASGIApp, Receive, Scope, Send

from tests.e2e.conftest import mcp_environment, serve
from tests.node_packages import installed_node

pytestmark = pytest.mark.e2e

SUITE_DIR = Path(__file__).parent / "conformance"
CLI = SUITE_DIR / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
# Scenarios that must pass, whatever the baseline says: the suite's generic checks of a server, and the resources,
# prompts, completion and elicitation scenarios the fixture set makes apply.
MUST_PASS = [
    "server-initialize",
    "ping",
    "tools-list",
    "tools-call-error",
    "resources-list",
    "prompts-list",
    "completion-complete",
    "resources-read-text",
    "resources-read-binary",
    "resources-templates-read",
    "prompts-get-simple",
    "prompts-get-with-args",
    "prompts-get-embedded-resource",
    "prompts-get-with-image",
    "dns-rebinding-protection",
    "tools-call-elicitation",
    "elicitation-sep1034-defaults",
    "elicitation-sep1330-enums",
    "server-sse-multiple-streams",
    "tools-call-image",
    "tools-call-audio",
    "tools-call-embedded-resource",
    "tools-call-mixed-content",
    "tools-call-with-progress",
]


class WithApiKey:
    """The suite's client sends no credentials: every request gets a real API key, which the endpoint checks."""

    def __init__(self, app: ASGIApp, key: str) -> None:
        self.app, self.header = app, (b"authorization", f"Bearer {key}".encode())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            scope = dict(scope, headers=[*scope["headers"], self.header])
        await self.app(scope, receive, send)


@pytest.fixture
def endpoint_url(local, monkeypatch) -> str:
    environment = mcp_environment(local)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    from devstack.conformance_fixtures import create_app
    from mcp_backend.api_keys import add_api_key
    from mcp_backend.config import McpSettings

    key = add_api_key(boto3.client("secretsmanager"), environment["API_KEYS_SECRET_ID"], "user-alice", "pro")
    server, thread, port = serve(WithApiKey(create_app(McpSettings.model_validate(environment)), key))
    yield f"http://127.0.0.1:{port}/mcp"
    server.should_exit = True
    thread.join(timeout=10)


def test_the_conformance_suite_fails_only_its_listed_scenarios(endpoint_url, tmp_path):
    # Given the suite installed from its lock, and the endpoint on loopback
    node = installed_node(SUITE_DIR)

    # When its active server suite runs against the endpoint with the baseline of expected failures
    options = ["--url", endpoint_url, "--expected-failures", "baseline.yml", "--output-dir", str(tmp_path)]
    run = subprocess.run(
        [str(node), str(CLI), "server", *options],
        cwd=SUITE_DIR,
        capture_output=True,
        text=True,
        timeout=300,
    )
    report = re.sub(r"\x1b\[[0-9;]*m", "", run.stdout)

    # Then only the listed scenarios fail, and every listed one still fails
    assert run.returncode == 0, report[-4000:] + run.stderr[-2000:]
    # And the generic checks of a server pass
    for scenario in MUST_PASS:
        assert re.search(rf"✓ {scenario}: [1-9][0-9]* passed, 0 failed", report), scenario
