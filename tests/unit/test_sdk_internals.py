"""The SDK's internal modules are reached through mcp_backend.mcp.sdk_internals alone, and that module refuses
to load on an SDK release it was not written for."""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
from pathlib import Path

import pytest

from mcp_backend.mcp import sdk_internals
from mcp_backend.mcp.sdk_internals import UnsupportedSdkVersion, check_sdk_version

PACKAGE = Path(__file__).resolve().parents[2] / "layers/shared/mcp_backend"
# The SDK modules a low-level server is documented to use; every other `mcp.*` module is internal.
PUBLIC_SDK_MODULES = {
    "mcp.server.lowlevel",
    "mcp.server.context",
    "mcp.server.extension",
    "mcp.server.request_state",
    "mcp.server.transport_security",
    "mcp.shared.exceptions",
    "mcp.shared.auth",
    "mcp.client.streamable_http",
    "mcp",
    "mcp_types",
    "mcp_types.jsonrpc",
    "mcp_types.version",
}
# The OAuth server's modules (mcp.server.auth.*) are the SDK's documented authorization server.
PUBLIC_SDK_PACKAGES = ("mcp.server.auth",)


def sdk_imports(path: Path) -> set[str]:
    modules: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules.add(node.module)
        elif isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
    return {m for m in modules if m == "mcp" or m.startswith(("mcp.", "mcp_types."))}


def test_only_sdk_internals_imports_internal_sdk_modules() -> None:
    # Given every module of the shared package but the one that holds the SDK's internals
    offenders = {}
    for path in PACKAGE.rglob("*.py"):
        if path.name == "sdk_internals.py":
            continue
        # When its imports of the SDK are read
        internal = {
            module
            for module in sdk_imports(path)
            if module not in PUBLIC_SDK_MODULES and not module.startswith(PUBLIC_SDK_PACKAGES)
        }
        if internal:
            offenders[str(path.relative_to(PACKAGE))] = sorted(internal)
    # Then none reaches past the SDK's public modules
    assert offenders == {}


@pytest.mark.parametrize("installed", ["2.3.0", "2.3.7"])
def test_a_release_in_the_range_is_accepted(installed: str) -> None:
    # Given a release the internals were written for, When checked, Then nothing is raised
    check_sdk_version(installed)


@pytest.mark.parametrize("installed", ["2.2.9", "2.4.0", "3.0.0", "1.27.1"])
def test_a_release_outside_the_range_is_refused_with_both_versions(installed: str) -> None:
    # Given a release the internals were not written for, When checked
    with pytest.raises(UnsupportedSdkVersion) as refused:
        check_sdk_version(installed)
    # Then the error names the installed release and the range it needs
    assert f"mcp {installed} is installed" in str(refused.value)
    assert "mcp>=2.3.0,<2.4.0" in str(refused.value)


def test_loading_the_module_on_another_release_fails_at_import(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given an environment whose SDK claims another release
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "2.4.0")
    try:
        # When the module is loaded again, Then the import itself fails, clearly
        # (reloading makes a new error class: the test matches its ImportError base)
        with pytest.raises(ImportError, match=r"mcp 2\.4\.0 is installed"):
            importlib.reload(sdk_internals)
    finally:
        monkeypatch.undo()
        importlib.reload(sdk_internals)
