"""A package whose `__init__` is deferred (`mcp_backend.lazy_imports.package_init_deferred`): its submodules import
without running it; the first read of any other name runs it once, also when threads race for it; a name it does
not define is still an AttributeError."""

from __future__ import annotations

import importlib
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from mcp_backend.lazy_imports import package_init_deferred

INIT = """
import time
from pkg_runs import runs
runs.append(__name__)
time.sleep(SLEEP)
from .engine import Engine
from . import engine as engine
EXPORTED = "from the package's __init__"
"""


@pytest.fixture
def heavy_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """A package `heavy` (with a sub-package `heavy.inner`) whose __init__ re-exports a submodule's class and
    records each run in `pkg_runs.runs`; every module it makes is dropped afterwards."""
    package = tmp_path / "heavy"
    (package / "inner").mkdir(parents=True)
    (package / "__init__.py").write_text(INIT.replace("SLEEP", "0.2"))
    (package / "engine.py").write_text("class Engine:\n    pass\n")
    (package / "wire.py").write_text("from heavy.engine import Engine\nWIRED = Engine\n")
    (package / "inner" / "__init__.py").write_text(INIT.replace("SLEEP", "0").replace("from .", "from .."))
    (package / "inner" / "leaf.py").write_text("LEAF = 1\n")
    (tmp_path / "pkg_runs.py").write_text("runs = []\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    before = set(sys.modules)
    yield importlib.import_module("pkg_runs").runs
    for name in set(sys.modules) - before:
        del sys.modules[name]


def test_submodules_import_without_running_the_package_init(heavy_package):
    # Given the package registered with its __init__ deferred
    package = package_init_deferred("heavy")

    # When its submodules are imported, by full name and through the package
    import heavy.wire
    from heavy import engine

    # Then they are the package's submodules, bound on it, and its __init__ has not run
    assert heavy.wire.WIRED is engine.Engine
    assert package.wire is heavy.wire and package.engine is engine
    assert heavy_package == []


def test_reading_a_name_the_init_defines_runs_it_once(heavy_package):
    # Given the package registered with its __init__ deferred, and one submodule already imported
    package = package_init_deferred("heavy")
    from heavy.engine import Engine

    # When names only its __init__ defines are read, as an attribute and by `from ... import`
    exported = package.EXPORTED
    from heavy import EXPORTED

    # Then the __init__ ran once, in the registered module, over the submodule already loaded
    assert exported == EXPORTED == "from the package's __init__"
    assert heavy_package == ["heavy"]
    assert sys.modules["heavy"] is package
    assert package.Engine is Engine


def test_a_name_nobody_defines_is_still_an_attribute_error(heavy_package):
    # Given the package registered with its __init__ deferred
    package = package_init_deferred("heavy")

    # When a name neither the __init__ nor a submodule defines is read
    # Then it is an AttributeError naming it (after the __init__ ran, once), and hasattr says no
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = package.no_such_name
    assert not hasattr(package, "no_such_name")
    assert heavy_package == ["heavy"]


def test_threads_reading_at_once_all_wait_for_the_one_init_run(heavy_package):
    # Given the package registered with its __init__ deferred (which takes 0.2 s)
    package = package_init_deferred("heavy")
    read: list[str] = []
    start = threading.Barrier(8)

    def reader() -> None:
        start.wait()
        read.append(package.EXPORTED)

    # When eight threads read one of its names at once
    threads = [threading.Thread(target=reader) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)

    # Then every one of them got the name, and the __init__ ran once
    assert read == ["from the package's __init__"] * 8
    assert heavy_package == ["heavy"]


def test_a_sub_package_defers_the_packages_it_is_in(heavy_package):
    # Given a sub-package registered with its __init__ deferred, nothing of the package imported before
    inner = package_init_deferred("heavy.inner")

    # When a module of the sub-package is imported
    from heavy.inner import leaf

    # Then neither __init__ has run, and the sub-package is bound on its package
    assert leaf.LEAF == 1
    assert heavy_package == []
    assert sys.modules["heavy"].inner is inner

    # And reading the sub-package's own name runs its __init__ alone
    assert inner.EXPORTED == "from the package's __init__"
    assert heavy_package == ["heavy.inner"]


def test_a_package_already_imported_is_returned_as_it_is(heavy_package):
    # Given the package imported the usual way (its __init__ ran)
    imported = importlib.import_module("heavy")

    # When it is registered with its __init__ deferred
    # Then it is the same module, and the __init__ does not run again
    assert package_init_deferred("heavy") is imported
    assert heavy_package == ["heavy"]
