"""DynamoDB applies each item write and its condition atomically: of two concurrent conditional writes to
one item, one fails its condition. moto's backend takes no lock, so under concurrent requests both could
pass. The local stack (and tests that race writes) make moto's item operations atomic with one lock."""

from __future__ import annotations

import functools
import os
import threading
from typing import Any

from devstack.stack.moto_internals import DynamoDBBackend

_LOCK = threading.RLock()


def _new_lock_in_a_forked_child() -> None:
    """A job's tool runs in a forked child (mcp_backend.jobs.apart), which may fork while another record thread
    holds the lock: the child gets its own (it works on its own copy of moto's items)."""
    global _LOCK
    _LOCK = threading.RLock()


os.register_at_fork(after_in_child=_new_lock_in_a_forked_child)
ITEM_OPERATIONS = ("put_item", "update_item", "delete_item", "get_item", "transact_write_items")
_PATCHED = "_devstack_atomic"


def make_item_operations_atomic() -> None:
    """Serialise moto's DynamoDB item operations (idempotent; for this process)."""
    for name in ITEM_OPERATIONS:
        operation = getattr(DynamoDBBackend, name)
        if getattr(operation, _PATCHED, False):
            continue
        setattr(DynamoDBBackend, name, _atomic(operation))


def _atomic(operation: Any) -> Any:
    @functools.wraps(operation)
    def locked(*args: Any, **kwargs: Any) -> Any:
        with _LOCK:
            return operation(*args, **kwargs)

    setattr(locked, _PATCHED, True)
    return locked
