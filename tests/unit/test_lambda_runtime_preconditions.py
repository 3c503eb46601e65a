"""What the Lambda runtime refuses before anything starts: a missing build, a build for another
architecture, a build older than the source, and no python3.13 to be had. Each is one line saying how
to fix it."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from devstack.runtime import interpreter
from devstack.runtime.build_output import check_build
from devstack.runtime.interpreter import InterpreterNotFound, find_runtime_python
from devstack.runtime.layer_cache_key import DIGEST_NAME
from devstack.runtime.runtime_image import LambdaRuntimeUnavailable
from devstack.stack.template import ROOT
from tests.e2e.conftest import free_port_block


@pytest.fixture
def build(tmp_path) -> tuple[Path, dict[str, Path]]:
    """A build folder as sam writes it (template.yaml, a function, a layer) and the sources it came from."""
    source_function, source_layer = tmp_path / "src" / "worker", tmp_path / "src" / "layer"
    (source_layer / "pkg").mkdir(parents=True)
    source_function.mkdir(parents=True)
    (source_function / "app.py").write_text("def handler(event, context): ...\n")
    (source_function / "Makefile").write_text("build-Worker:\n")
    (source_layer / "pkg" / "logic.py").write_text("VALUE = 1\n")
    built = tmp_path / "build"
    (built / "Worker").mkdir(parents=True)
    (built / "Layer" / "python" / "pkg").mkdir(parents=True)
    (built / "template.yaml").write_text("{}")
    shutil.copy(source_function / "app.py", built / "Worker" / "app.py")
    shutil.copy(source_layer / "pkg" / "logic.py", built / "Layer" / "python" / "pkg" / "logic.py")
    (built / "Layer" / "python" / "_core.cpython-313-x86_64-linux-gnu.so").write_bytes(b"")
    return built, {"Worker": source_function, "Layer": source_layer}


def test_a_current_build_for_this_architecture_is_accepted(build):
    # Given a build made from the current sources for x86_64
    built, sources = build

    # When it is checked for an x86_64 host, Then nothing is refused
    check_build(built, "x86_64", sources)


def test_a_missing_build_names_the_make_build_to_run(tmp_path, build):
    # Given no build at all
    _, sources = build

    # When it is checked, Then the one line names the build command for this architecture
    with pytest.raises(LambdaRuntimeUnavailable, match=r"no build in .*: run `make build ARCH=x86_64"):
        check_build(tmp_path / "absent", "x86_64", sources)


def test_a_build_for_another_architecture_is_refused(build):
    # Given a build whose compiled wheels are for x86_64
    built, sources = build

    # When it is checked for an arm64 host, Then it names the architecture mismatch and the fix
    with pytest.raises(LambdaRuntimeUnavailable, match=r"another architecture .*run `make build"):
        check_build(built, "arm64", sources)


def test_a_layers_cache_key_digest_is_a_build_input_not_a_missing_file(build):
    # Given the layer's folder holding the digest `make build` writes for sam's cache key (never shipped)
    built, sources = build
    (sources["Layer"] / DIGEST_NAME).write_text("0" * 64 + "\n")

    # When it is checked, Then the build is current
    check_build(built, "x86_64", sources)


def test_a_build_older_than_its_source_names_the_changed_file(build):
    # Given a layer module changed after the build
    built, sources = build
    (sources["Layer"] / "pkg" / "logic.py").write_text("VALUE = 2\n")

    # When it is checked, Then the changed file is named
    with pytest.raises(LambdaRuntimeUnavailable, match=r"older than .*logic\.py"):
        check_build(built, "x86_64", sources)


def test_a_layer_module_built_into_another_layer_is_current_and_a_changed_one_is_not(build):
    # Given a module of the layer's sources that the build ships in another layer (Lambda merges their python/)
    built, sources = build
    (sources["Layer"] / "pkg" / "endpoint.py").write_text("SERVED = True\n")
    (built / "OtherLayer" / "python" / "pkg").mkdir(parents=True)
    shutil.copy(sources["Layer"] / "pkg" / "endpoint.py", built / "OtherLayer" / "python" / "pkg" / "endpoint.py")

    # When it is checked, Then nothing is refused
    check_build(built, "x86_64", sources)

    # When the module changes after the build, Then the check names it
    (sources["Layer"] / "pkg" / "endpoint.py").write_text("SERVED = False\n")
    with pytest.raises(LambdaRuntimeUnavailable, match=r"older than .*endpoint\.py"):
        check_build(built, "x86_64", sources)


def test_no_python313_anywhere_says_how_to_get_one(monkeypatch, tmp_path):
    # Given a machine with no python3.13 on PATH, no uv and no pyenv versions
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path / "pyenv"))
    monkeypatch.setattr(interpreter, "UV", tmp_path / "no-uv")

    # When the runtime looks for its interpreter (even allowed to install one)
    with pytest.raises(InterpreterNotFound) as missing:
        find_runtime_python(install=True)

    # Then the one line says how to get one
    assert "uv python install 3.13" in str(missing.value) and "\n" not in str(missing.value)


def fake_uv_finding(tmp_path: Path, version: str) -> Path:
    """A uv whose `python find` answers an interpreter reporting `version` (and whose install does nothing)."""
    python, uv = tmp_path / "python", tmp_path / "uv"
    python.write_text(f"#!/bin/sh\necho {version}\n")
    uv.write_text(f'#!/bin/sh\n[ "$2" = find ] && echo {python}\nexit 0\n')
    for script in (python, uv):
        script.chmod(0o755)
    return uv


def test_the_deploy_build_takes_only_the_pinned_interpreter_and_says_how_to_install_it(monkeypatch, tmp_path):
    # Given uv finding a python3.13 of another patch release than the deploy build's
    monkeypatch.setattr(interpreter, "UV", fake_uv_finding(tmp_path, "3.13.0"))

    # When the deploy build asks for its interpreter (allowed to install it), Then that one is refused, and the
    # line names the exact version to install
    with pytest.raises(InterpreterNotFound) as missing:
        find_runtime_python(install=True, exact=True)
    assert f"uv python install {interpreter.DEPLOY_VERSION}`" in str(missing.value)

    # And the pinned release itself is taken
    monkeypatch.setattr(interpreter, "UV", fake_uv_finding(tmp_path, interpreter.DEPLOY_VERSION))
    assert find_runtime_python(exact=True) == tmp_path / "python"


@pytest.mark.e2e
def test_make_dev_with_the_lambda_runtime_and_no_build_stops_with_one_line_and_status_2(tmp_path):
    # Given no build where the Lambda runtime is told to look
    # When the local stack is started with the Lambda runtime
    command = ["dev", "--port", str(free_port_block()), "--runtime", "lambda", "--build-dir", str(tmp_path)]
    result = subprocess.run(
        [sys.executable, "-m", "devstack", *command],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{ROOT / 'layers' / 'shared'}:{ROOT}", "HOME": str(Path.home())},
    )

    # Then it exits with status 2 and one error line naming the build to run
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.returncode == 2, result.stderr
    assert len(errors) == 1 and "make build" in errors[0]
