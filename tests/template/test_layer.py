"""The layers ship the versions the tests run: their requirements are the lock's export, the core layer's
from the project's dependencies, the MCP layer's from the mcp-layer group without what the core one ships."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
REQUIREMENTS = ROOT / "layers" / "shared" / "requirements.txt"
MCP_REQUIREMENTS = ROOT / "layers" / "mcp" / "requirements.txt"


def pins(text: str) -> dict[str, str]:
    lines = [line.split(";")[0].strip() for line in text.splitlines() if line and not line.startswith((" ", "#"))]
    return dict(line.split("==") for line in lines)


def test_layer_requirements_are_exactly_the_lock_export(tmp_path):
    uv = shutil.which("uv") or str(ROOT / ".tools" / "bin" / "uv")
    if not Path(uv).exists():
        pytest.skip("uv is bootstrapped by `make env`")
    exported, exported_mcp = tmp_path / "requirements.txt", tmp_path / "mcp-requirements.txt"
    # The same command `make layer-requirements` runs.
    subprocess.run(
        [
            "make",
            "-s",
            "layer-requirements",
            f"LAYER_REQUIREMENTS={exported}",
            f"MCP_LAYER_REQUIREMENTS={exported_mcp}",
        ],
        cwd=ROOT,
        check=True,
    )
    assert pins(exported.read_text()) == pins(REQUIREMENTS.read_text())
    assert pins(exported_mcp.read_text()) == pins(MCP_REQUIREMENTS.read_text())
    # With the lock's hashes, which the layer build installs with pip --require-hashes
    assert exported.read_text() == REQUIREMENTS.read_text()
    assert exported_mcp.read_text() == MCP_REQUIREMENTS.read_text()
    for requirements in (REQUIREMENTS, MCP_REQUIREMENTS):
        lines = requirements.read_text().splitlines()
        pinned = [i for i, line in enumerate(lines) if "==" in line and not line.startswith((" ", "#"))]
        assert pinned and all(lines[i + 1].strip().startswith("--hash=sha256:") for i in pinned), requirements


def test_the_mcp_stack_is_only_in_the_mcp_layer_and_no_package_is_in_both():
    core, mcp = set(pins(REQUIREMENTS.read_text())), set(pins(MCP_REQUIREMENTS.read_text()))
    assert {"mcp", "starlette", "uvicorn", "sse-starlette", "pyjwt", "cryptography"} <= mcp
    assert not {"mcp", "starlette", "uvicorn", "sse-starlette", "pyjwt", "cryptography", "aws-xray-sdk"} & core
    assert not core & mcp


def test_layer_ships_no_runtime_provided_sdk():
    for requirements in (REQUIREMENTS, MCP_REQUIREMENTS):
        assert not {"boto3", "botocore", "s3transfer"} & set(pins(requirements.read_text()))
    assert "aws-lambda-powertools" in pins(REQUIREMENTS.read_text())
