"""Modules loaded when first used rather than when a handler module is imported: a cold start pays only for what
its first request needs.

- `loaded_on_first_use`: a module executed when one of its attributes is first read (the standard library's
  `importlib.util.LazyLoader`); botocore's exception classes, say, for except clauses.
- `package_init_deferred`: a package whose own `__init__` runs when a name that is not one of its submodules is
  first read, while its submodules import as usual. The MCP SDK's `mcp` and `mcp.server` packages re-export the
  client, the stdio transports and MCPServer from their `__init__`; the endpoint imports the low-level server's
  modules by their full names and needs none of those.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys
import threading
from types import ModuleType
from typing import Any


def loaded_on_first_use(name: str) -> ModuleType:
    """Module `name`, executed when one of its attributes is first read (the standard library's LazyLoader);
    a package it is in that nothing has imported yet is loaded alike, not executed to find it."""
    if name in sys.modules:
        return sys.modules[name]
    parent_name, _, child = name.rpartition(".")
    if parent_name:
        # Found in the package's folders, as the import system would, without running the package's __init__.
        parent_spec = importlib.util.find_spec(parent_name)
        if parent_spec is None or parent_spec.submodule_search_locations is None:
            raise ModuleNotFoundError(name)
        parent = loaded_on_first_use(parent_name)
        spec = importlib.machinery.PathFinder.find_spec(name, parent_spec.submodule_search_locations)
    else:
        spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        raise ModuleNotFoundError(name)
    spec.loader = importlib.util.LazyLoader(spec.loader)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    if parent_name:  # as the import system binds a loaded submodule: `import botocore.exceptions` code reads it there
        setattr(parent, child, module)
    return module


def package_init_deferred(name: str) -> ModuleType:
    """Package `name` registered without running its `__init__` (nor those of the packages it is in that nothing
    has imported yet). Its submodules import as usual; the first read of any other name runs the `__init__`,
    once, and answers from it. A package already imported is returned as it is."""
    if name in sys.modules:
        return sys.modules[name]
    parent_name, _, child = name.rpartition(".")
    parent = package_init_deferred(parent_name) if parent_name else None
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None or spec.submodule_search_locations is None:
        raise ModuleNotFoundError(f"{name} is not a package")
    package = importlib.util.module_from_spec(spec)  # __path__, __spec__ and __file__, as the import system sets
    package.__getattr__ = _InitOnFirstRead(package, spec.loader)  # type: ignore[method-assign]
    sys.modules[name] = package
    if parent is not None:
        setattr(parent, child, package)
    return package


class _InitOnFirstRead:
    """A deferred package's module `__getattr__` (PEP 562), called only for names not in its namespace: a
    submodule is imported; any other name runs the package's `__init__` first, once (other threads wait for it)."""

    def __init__(self, package: ModuleType, loader: Any) -> None:
        self.package = package
        self.loader = loader
        self.lock = threading.RLock()
        self.ran = False

    def __call__(self, attribute: str) -> Any:
        qualified = f"{self.package.__name__}.{attribute}"
        if not attribute.startswith("__") and importlib.util.find_spec(qualified) is not None:
            return importlib.import_module(qualified)
        namespace = vars(self.package)
        with self.lock:
            if not self.ran:
                self.ran = True
                try:
                    self.loader.exec_module(self.package)
                finally:
                    if namespace.get("__getattr__") is self:
                        del namespace["__getattr__"]
        if attribute in namespace:
            return namespace[attribute]
        own = namespace.get("__getattr__")  # the package's own PEP 562 hook, if its __init__ defines one
        if own is not None and own is not self:
            return own(attribute)
        raise AttributeError(f"module {self.package.__name__!r} has no attribute {attribute!r}")
