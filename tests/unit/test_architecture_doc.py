"""docs/architecture.md names every module of the local stack and every part of the shared package, so the page
a newcomer reads first cannot drift from the tree."""

from __future__ import annotations

from devstack.stack.template import ROOT
from tests.unit.test_import_graph import LAYERS, LOCAL_STACK_LAYERS

PAGE = (ROOT / "docs" / "architecture.md").read_text()


def test_every_local_stack_module_is_on_the_architecture_page():
    # Given every module of devstack
    modules = {
        str(path.relative_to(ROOT / "devstack"))
        for path in (ROOT / "devstack").rglob("*.py")
        if path.name != "__init__.py" and "var_runtime" not in path.parts
    }

    # Then the page names each
    assert {module for module in modules if f"`{module}`" not in PAGE} == set()


def test_every_layer_of_the_shared_package_is_on_the_architecture_page():
    # Given every part the import check places in a layer
    parts = set().union(*LAYERS)

    # Then the layering table names each
    assert {name for name in parts if f"`{name}`" not in PAGE} == set()


def test_every_layer_of_the_local_stack_is_on_the_architecture_page():
    # Given every part of the local stack the import check places in a layer, but its top-level commands
    parts = set().union(*LOCAL_STACK_LAYERS) - {"commands"}

    # Then the page names each
    assert {name for name in parts if f"`{name}`" not in PAGE} == set()
