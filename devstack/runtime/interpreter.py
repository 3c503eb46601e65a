"""The interpreter the Lambda runtime runs functions with (python3.13), found the way a developer would.

Search order: `python3.13` on PATH, `uv python find 3.13`, pyenv's versions; with `install=True`, then
`uv python install 3.13`. Where none can be had the caller gets one line saying how to get one.

With `exact=True` (`make build EXACT_PYTHON=1`, what the deploy job runs) only DEPLOY_VERSION will do, found or
installed by the pinned uv (tools/uv), whose release carries the sha256 of each interpreter it downloads: the
deployed layers' bytecode comes from one known interpreter, never whichever 3.13 a runner happens to have.

`python -m devstack.runtime.interpreter [--install] [--exact]` prints the interpreter's path (exit 0) or that line
(exit 2).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

from devstack.stack.template import ROOT

RUNTIME_VERSION = "3.13"
# The deploy build's interpreter; a release uv (tools/uv/pyproject.toml) knows (`uv python list --only-downloads`).
DEPLOY_VERSION = "3.13.18"
UV = ROOT / ".tools" / "bin" / "uv"


class InterpreterNotFound(Exception):
    """No python3.13 could be found (or installed); the message says how to get one."""


def find_runtime_python(install: bool = False, exact: bool = False) -> Path:
    version = DEPLOY_VERSION if exact else RUNTIME_VERSION
    for candidate in [_uv_find(version)] if exact else _candidates():
        if candidate is not None and _is_version(candidate, version):
            return candidate
    if install and _uv() is not None:
        subprocess.run([str(_uv()), "python", "install", version], check=False, capture_output=True)
        found = _uv_find(version)
        if found is not None and _is_version(found, version):
            return found
    if exact:
        raise InterpreterNotFound(f"python {version} is not installed: install it with `uv python install {version}`")
    raise InterpreterNotFound(
        f"no python{RUNTIME_VERSION} found (PATH, `uv python find {RUNTIME_VERSION}`, pyenv): install one with "
        f"`uv python install {RUNTIME_VERSION}` or `pyenv install {RUNTIME_VERSION}`"
    )


def _candidates() -> list[Path | None]:
    on_path = shutil.which(f"python{RUNTIME_VERSION}")
    pyenv_root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    pyenv = sorted((pyenv_root / "versions").glob(f"{RUNTIME_VERSION}.*/bin/python{RUNTIME_VERSION}"), reverse=True)
    return [Path(on_path) if on_path else None, _uv_find(RUNTIME_VERSION), *pyenv]


def _uv() -> Path | None:
    if UV.exists():
        return UV
    found = shutil.which("uv")
    return Path(found) if found else None


def _uv_find(version: str) -> Path | None:
    uv = _uv()
    if uv is None:
        return None
    result = subprocess.run(
        [str(uv), "python", "find", "--no-project", version], capture_output=True, text=True, check=False
    )
    path = result.stdout.strip()
    return Path(path) if result.returncode == 0 and path else None


def _is_version(python: Path, version: str) -> bool:
    """True when the interpreter is `version`: 3.13 (any patch release) or 3.13.18 (that one)."""
    fields = "'%d.%d.%d' % sys.version_info[:3]" if version.count(".") == 2 else "'%d.%d' % sys.version_info[:2]"
    try:
        result = subprocess.run(
            [str(python), "-c", f"import sys; print({fields})"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return result.returncode == 0 and result.stdout.strip() == version


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devstack.runtime.interpreter", description=__doc__)
    parser.add_argument("--install", action="store_true", help=f"install python{RUNTIME_VERSION} with uv if missing")
    parser.add_argument("--exact", action="store_true", help=f"python {DEPLOY_VERSION} only (the deploy build's)")
    args = parser.parse_args(argv)
    try:
        print(find_runtime_python(install=args.install, exact=args.exact))
    except InterpreterNotFound as missing:
        print(f"error: {missing}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
