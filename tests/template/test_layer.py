"""The layer ships the versions the tests run: its requirements are the lock's export."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
REQUIREMENTS = ROOT / "layers" / "shared" / "requirements.txt"


def pins(text: str) -> dict[str, str]:
    lines = [line.split(";")[0].strip() for line in text.splitlines() if line and not line.startswith((" ", "#"))]
    return dict(line.split("==") for line in lines)


def test_layer_requirements_are_exactly_the_lock_export(tmp_path):
    uv = shutil.which("uv") or str(ROOT / ".tools" / "bin" / "uv")
    if not Path(uv).exists():
        pytest.skip("uv is bootstrapped by `make env`")
    exported = tmp_path / "requirements.txt"
    # The same command `make layer-requirements` runs.
    subprocess.run(["make", "-s", "layer-requirements", f"LAYER_REQUIREMENTS={exported}"], cwd=ROOT, check=True)
    assert pins(exported.read_text()) == pins(REQUIREMENTS.read_text())


def test_layer_ships_no_runtime_provided_sdk():
    assert not {"boto3", "botocore", "s3transfer"} & set(pins(REQUIREMENTS.read_text()))
    assert "aws-lambda-powertools" in pins(REQUIREMENTS.read_text())
