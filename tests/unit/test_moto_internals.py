"""The local stack reaches into moto's internals through one module, which refuses a moto it was not tested
with."""

from __future__ import annotations

import ast

import pytest

from devstack.stack.moto_internals import MOTO_VERSION, UnsupportedMotoVersion, check_moto_version
from devstack.stack.template import ROOT

PUBLIC_MOTO = {"moto"}  # `from moto import mock_aws` and the like: moto's public API


def test_a_moto_version_the_local_stack_was_not_tested_with_is_refused_by_name():
    # When the compatibility module meets a moto minor version it was not written against
    with pytest.raises(UnsupportedMotoVersion, match=r"moto 6\.0\.0 .*devstack/stack/moto_internals\.py"):
        check_moto_version("6.0.0")


def test_the_installed_moto_is_one_it_was_tested_with():
    check_moto_version(MOTO_VERSION)


def test_only_the_compatibility_module_imports_moto_internals():
    # Given every module of the local stack
    offenders = []
    for path in (ROOT / "devstack").rglob("*.py"):
        if path.name == "moto_internals.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("moto"):
                if node.module not in PUBLIC_MOTO:
                    offenders.append(f"{path.relative_to(ROOT)}: from {node.module}")
            elif isinstance(node, ast.Import):
                offenders += [
                    f"{path.relative_to(ROOT)}: import {a.name}" for a in node.names if a.name.startswith("moto.")
                ]

    # Then none imports a moto module beyond the public package
    assert offenders == []
