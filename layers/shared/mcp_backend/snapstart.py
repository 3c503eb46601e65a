"""SnapStart runtime hooks (the `SnapStart` parameter, off by default). With SnapStart, Lambda runs a function's init
once, when a version is published, and resumes every new execution environment from that one snapshot, so what
init left in memory is shared by all of them ("Handling uniqueness with Lambda SnapStart",
https://docs.aws.amazon.com/lambda/latest/dg/snapstart-uniqueness.html). After a restore this refreshes what must
not be shared:
- `random`'s state, which the writers' retry jitter draws from (environments that drew the same jitter would retry
  in step); `secrets`, `uuid.uuid4` and `os.urandom` read the kernel's entropy on each call and need nothing;
- the cached boto3 clients and boto3's default session (mcp_backend.aws.forget_clients): they carry the
  credentials resolved and the connections opened before the snapshot; and, with tracing on, the span exporter's
  connection and credentials (mcp_backend.tracing.setup.forget_connections).

Lambda's Python runtime runs the hooks registered with its `snapshot_restore_py` library
(https://docs.aws.amazon.com/lambda/latest/dg/snapstart-runtime-hooks-python.html); the library comes with the
managed runtime and is not installed elsewhere, so off Lambda nothing is registered and `refresh_after_restore`
is what tests call. Registration happens in the handler decorator (mcp_backend.observability), so every handler
module registers the hook during init, before the snapshot."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from mcp_backend.aws import forget_clients
from mcp_backend.tracing.setup import forget_connections

HookRegistration = Callable[[Callable[[], None]], Any]
_registered = False


def refresh_after_restore() -> None:
    """What runs after Lambda resumes an environment from the snapshot (and never otherwise)."""
    random.seed()  # from os.urandom: the restored environment's own entropy
    forget_clients()
    forget_connections()


def register_hooks(register: HookRegistration | None = None) -> bool:
    """Register `refresh_after_restore` with the runtime's hook library once per process; False where there is none
    (anywhere but Lambda's Python runtime). `register` stands in for the library's `register_after_restore`."""
    global _registered
    if _registered:
        return True
    register = register or _runtime_registration()
    if register is None:
        return False
    register(refresh_after_restore)
    _registered = True
    return True


def _runtime_registration() -> HookRegistration | None:
    try:
        from snapshot_restore_py import register_after_restore  # provided by Lambda's Python runtime only
    except ImportError:
        return None
    return register_after_restore
