"""Run a template-declared function in this process, the no-Docker twin of `sam local invoke`.

Each function is imported from its own folder under a module name of its own (every function has
an `app.py`), with its layers on sys.path and, while it imports and runs, exactly the environment
its template entry declares plus what the Lambda runtime adds.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from devstack.runtime.logs import function_scope
from devstack.runtime.running_function import running
from devstack.stack.resources import FunctionSpec

# One invocation at a time per process: functions share os.environ and module state.
_INVOKE_LOCK = threading.RLock()


class HandlerImportError(Exception):
    """The function's handler module failed to import; names the function."""


class FunctionTimedOut(Exception):
    """The invocation ran past the function's configured Timeout."""


@dataclass
class LocalLambdaContext:
    """The attributes and method of the context object the Python runtime passes to handlers."""

    function_name: str
    invoked_function_arn: str
    memory_limit_in_mb: int
    timeout_seconds: int
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    function_version: str = "$LATEST"
    log_group_name: str = ""
    log_stream_name: str = "local"
    identity: Any = None
    client_context: Any = None
    _deadline: float = 0.0

    def __post_init__(self) -> None:
        self.log_group_name = self.log_group_name or f"/aws/lambda/{self.function_name}"
        self._deadline = time.monotonic() + self.timeout_seconds

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


@contextlib.contextmanager
def function_environment(spec: FunctionSpec, region: str) -> Iterator[None]:
    """Apply the function's declared environment (and the runtime's own variables), then restore."""
    runtime_vars = {
        "AWS_LAMBDA_FUNCTION_NAME": spec.name,
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(spec.memory_size),
        "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
        "AWS_LAMBDA_LOG_GROUP_NAME": f"/aws/lambda/{spec.name}",
        "AWS_REGION": region,
        "AWS_DEFAULT_REGION": region,
        "_HANDLER": spec.handler,
    }
    applied = {**runtime_vars, **spec.environment}
    # Only the keys the function sets are changed and put back: other threads (the served MCP app, event
    # source pollers) keep reading a complete environment meanwhile.
    saved = {name: os.environ.get(name) for name in applied}
    os.environ.update(applied)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


class FunctionRuntime:
    """Imports a function's handler once and invokes it with a fresh context per call."""

    def __init__(self, spec: FunctionSpec, region: str, overrides: dict[str, str] | None = None) -> None:
        if overrides:
            spec = dataclasses.replace(spec, environment={**spec.environment, **overrides})
        self.spec = spec
        self.region = region
        self._handler: Callable[[Any, Any], Any] | None = None

    def handler(self) -> Callable[[Any, Any], Any]:
        if self._handler is None:
            with (
                _INVOKE_LOCK,
                function_environment(self.spec, self.region),
                function_scope(self.spec.logical_id),
                running(self.spec),
            ):
                self._handler = self._load()
        return self._handler

    def invoke(self, event: Any) -> Any:
        handler = self.handler()
        context = LocalLambdaContext(
            function_name=self.spec.name,
            invoked_function_arn=self.spec.arn,
            memory_limit_in_mb=self.spec.memory_size,
            timeout_seconds=self.spec.timeout,
        )
        with (
            _INVOKE_LOCK,
            function_environment(self.spec, self.region),
            function_scope(self.spec.logical_id),
            running(self.spec),
        ):
            result = handler(event, context)
        if context.get_remaining_time_in_millis() == 0:
            # Lambda would have stopped the invocation; its result never reaches the caller.
            raise FunctionTimedOut(f"{self.spec.logical_id} exceeded its Timeout of {self.spec.timeout} s")
        return result

    def _load(self) -> Callable[[Any, Any], Any]:
        module_path, _, attribute = self.spec.handler.rpartition(".")
        source = self.spec.code_dir / (module_path.replace(".", "/") + ".py")
        for layer in self.spec.layer_dirs:
            if str(layer) not in sys.path:
                sys.path.insert(0, str(layer))
        unique_name = f"_devstack_fn_{self.spec.logical_id}_{module_path.replace('.', '_')}"
        try:
            module = _import_file(unique_name, source)
            return getattr(module, attribute)
        except Exception as error:
            raise HandlerImportError(
                f"{self.spec.logical_id}: handler {self.spec.handler} failed to import "
                f"({type(error).__name__}: {error})"
            ) from error


def _import_file(name: str, path: os.PathLike[str]) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"no module at {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module
