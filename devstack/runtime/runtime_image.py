"""The runtime image every execution environment shares: python3.13 (/var/lang), AWS's Runtime Interface
Client with /var/runtime's bootstrap, and the boto3 the Python runtime provides, installed once per set of pins
(uv.lock's lambda-runtime groups) under .devstack/runtime.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from devstack.runtime.interpreter import RUNTIME_VERSION, UV, InterpreterNotFound, find_runtime_python
from devstack.runtime.sandbox import namespaces_available
from devstack.stack.template import ROOT

RUNTIME_CACHE = ROOT / ".devstack" / "runtime"
BOOTSTRAP_FILES = Path(__file__).parent / "var_runtime"


class LambdaRuntimeUnavailable(Exception):
    """The Lambda runtime cannot start on this machine; the message is one line saying how to fix it."""


def host_architecture() -> str:
    machine = platform.machine().lower()
    return {"aarch64": "arm64", "arm64": "arm64", "x86_64": "x86_64", "amd64": "x86_64"}.get(machine, machine)


@dataclass(frozen=True)
class RuntimeImage:
    """What every environment shares: python3.13 (/var/lang), the RIC (/var/runtime), boto3."""

    python: Path
    prefix: Path
    runtime_dir: Path
    provided_packages: Path
    architecture: str
    namespaces: bool


def prepare_runtime_image() -> RuntimeImage:
    try:
        python = find_runtime_python(install=True)
    except InterpreterNotFound as missing:
        raise LambdaRuntimeUnavailable(str(missing)) from None
    prefix = Path(
        subprocess.run(
            [str(python), "-c", "import sys; print(sys.base_prefix)"], capture_output=True, text=True, check=True
        ).stdout.strip()
    )
    architecture = host_architecture()
    interface = _export_group("lambda-runtime-interface")
    provided = _export_group("lambda-runtime-provided")
    bootstrap = b"".join(p.read_bytes() for p in sorted(BOOTSTRAP_FILES.iterdir()))
    key = hashlib.sha256(
        b"\0".join([interface.encode(), provided.encode(), bootstrap, str(prefix).encode(), architecture.encode()])
    ).hexdigest()[:16]
    base = RUNTIME_CACHE / f"python{RUNTIME_VERSION}-{architecture}-{key}"
    if not (base / "ready").exists():
        # Built aside and renamed into place: processes that start at once (a parallel test run's workers)
        # each build their own, the first rename wins, and none ever reads a half-built image.
        building = base.with_name(f"{base.name}.{os.getpid()}.building")
        shutil.rmtree(building, ignore_errors=True)
        _install(python, interface, building / "var-runtime")
        _install(python, provided, building / "site-packages")
        for source in BOOTSTRAP_FILES.iterdir():
            shutil.copy2(source, building / "var-runtime" / source.name)
        (building / "ready").write_text("")
        try:
            building.rename(base)
        except OSError:
            if (base / "ready").exists():  # another process's image is in place
                shutil.rmtree(building, ignore_errors=True)
            else:  # one an interrupted install left half-built
                shutil.rmtree(base, ignore_errors=True)
                building.rename(base)
    runtime_dir, provided_dir = base / "var-runtime", base / "site-packages"
    return RuntimeImage(python, prefix, runtime_dir, provided_dir, architecture, namespaces_available())


def _export_group(group: str) -> str:
    """A dependency group's pins from uv.lock (the versions the local runtime installs)."""
    return subprocess.run(
        [str(UV), "export", "--frozen", "--only-group", group, "--no-hashes", "--no-header", "--no-emit-project"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    ).stdout


def _install(python: Path, requirements: str, target: Path) -> None:
    target.mkdir(parents=True)
    with tempfile.NamedTemporaryFile("w", suffix=".txt") as pins:
        pins.write(requirements)
        pins.flush()
        result = subprocess.run(
            [str(UV), "pip", "install", "--quiet", "--python", str(python), "--target", str(target), "-r", pins.name],
            capture_output=True,
            text=True,
            check=False,
        )
    if result.returncode != 0:
        raise LambdaRuntimeUnavailable(f"could not install the Lambda runtime's packages: {result.stderr.strip()}")
