"""`make help` lists every target a developer can run, from the `##` text on the target's own line."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from devstack.stack.template import ROOT

TARGET = re.compile(r"^([a-zA-Z0-9_-]+):(?!=)")


def targets() -> set[str]:
    lines = (ROOT / "Makefile").read_text().splitlines()
    return {match.group(1) for line in lines if (match := TARGET.match(line))}


def test_every_make_target_says_what_it_does():
    # Given every target declared in the Makefile
    declared = targets()

    # When the lines that declare them are read
    undocumented = {
        target
        for target in declared
        if not any(
            line.startswith(f"{target}:") and " ## " in line for line in (ROOT / "Makefile").read_text().splitlines()
        )
    }

    # Then each carries its one-line description for make help
    assert undocumented == set()


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_help_lists_every_target():
    # When a developer runs make help
    listed = subprocess.run(
        ["make", "--no-print-directory", "help"], cwd=ROOT, capture_output=True, text=True, check=True
    )

    # Then every target is on it
    shown = {line.split()[1] for line in listed.stdout.splitlines() if line.strip().startswith("make ")}
    assert shown == targets()
