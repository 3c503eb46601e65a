"""The Lambda runtime's image (python3.13's prefix, the Runtime Interface Client, boto3) is built once per
machine into .devstack/runtime: processes that start at once (a parallel test run's workers, a make dev
beside them) each see a whole image, never one another builds or removes under them."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from devstack.runtime import runtime_image


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """The runtime cache in a temporary folder; installing writes one file instead of running uv."""
    monkeypatch.setattr(runtime_image, "RUNTIME_CACHE", tmp_path / "runtime")
    monkeypatch.setattr(runtime_image, "find_runtime_python", lambda install: Path(sys.executable))
    monkeypatch.setattr(runtime_image, "_export_group", lambda group: f"{group}==1\n")
    monkeypatch.setattr(runtime_image, "_install", install_marker)
    return tmp_path / "runtime"


def install_marker(python: Path, requirements: str, target: Path) -> None:
    target.mkdir(parents=True)
    (target / "installed.txt").write_text(requirements)


def test_a_first_start_builds_a_whole_image_and_leaves_no_folder_half_built(cache):
    # When the image is prepared on a machine that has none
    image = runtime_image.prepare_runtime_image()

    # Then it holds both installs and the bootstrap, and the cache holds only the finished image
    assert (image.runtime_dir / "installed.txt").read_text() == "lambda-runtime-interface==1\n"
    assert (image.provided_packages / "installed.txt").read_text() == "lambda-runtime-provided==1\n"
    assert (image.runtime_dir / "bootstrap").exists()
    assert [path.name for path in cache.iterdir()] == [image.runtime_dir.parent.name]


def test_an_image_another_process_finished_first_is_used_and_this_ones_copy_is_dropped(cache, monkeypatch):
    # Given another process that finishes the same image while this one is still installing
    def install_while_another_finishes(python: Path, requirements: str, target: Path) -> None:
        install_marker(python, requirements, target)
        if target.name == "site-packages":
            finished = cache / target.parent.name.rsplit(".", 2)[0]  # <image>.<pid>.building
            (finished / "var-runtime").mkdir(parents=True)
            (finished / "var-runtime" / "installed.txt").write_text("the other process's\n")
            (finished / "ready").write_text("")

    monkeypatch.setattr(runtime_image, "_install", install_while_another_finishes)

    # When this process's install ends
    image = runtime_image.prepare_runtime_image()

    # Then it uses the image in place, untouched, and removes its own copy
    assert (image.runtime_dir / "installed.txt").read_text() == "the other process's\n"
    assert [path.name for path in cache.iterdir()] == [image.runtime_dir.parent.name]


def test_a_half_built_image_an_interrupted_install_left_is_replaced(cache):
    # Given a folder an interrupted install left: the image's name, no ready mark
    first = runtime_image.prepare_runtime_image()
    (first.runtime_dir.parent / "ready").unlink()
    (first.runtime_dir / "installed.txt").unlink()

    # When the image is prepared again
    image = runtime_image.prepare_runtime_image()

    # Then it is whole again
    assert (image.runtime_dir / "installed.txt").read_text() == "lambda-runtime-interface==1\n"
    assert (image.runtime_dir.parent / "ready").exists()
    assert [path.name for path in cache.iterdir()] == [image.runtime_dir.parent.name]
