"""The endpoint's process logs each line once, as JSON on stdout: building the SDK server adds no root handler
of its own, and the libraries' warnings come out in Powertools' format."""

from __future__ import annotations

import json
import subprocess
import sys

from devstack.stack.template import ROOT

PROBE = """
import logging
from mcp_backend.mcp.server import create_app
from mcp_backend.observability import logger
from tests.unit.endpoint_fakes import SETTINGS
create_app(SETTINGS)
create_app(SETTINGS)
logger.info("ours")
logging.getLogger("mcp.server.lowlevel").warning("the SDK's")
logging.getLogger("mcp.server.lowlevel").info("below the root's level")
print("handlers", len(logging.root.handlers))
"""


def test_each_line_is_written_once_as_json_and_the_sdk_adds_no_handler():
    # Given a fresh interpreter (no test framework's handlers on the root logger) that builds the app twice
    environment = {"PYTHONPATH": f"{ROOT / 'layers' / 'shared'}:{ROOT}", "AWS_REGION": "us-east-1"}

    # When our logger and an SDK logger write a line each
    out = subprocess.run([sys.executable, "-c", PROBE], env=environment, capture_output=True, text=True, cwd=ROOT)

    # Then each line is on stdout once, as JSON; nothing on stderr; the root logger has one handler
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert lines[-1] == "handlers 1"
    messages = [json.loads(line)["message"] for line in lines[:-1] if line.startswith("{")]
    assert messages.count("ours") == 1
    assert messages.count("the SDK's") == 1
    assert "below the root's level" not in out.stdout + out.stderr
    assert out.stderr == ""
