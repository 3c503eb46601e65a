"""Blocking work (boto3 calls) run on anyio's worker threads, with its exception carried back as a value.

An exception raised in the worker thread crosses back through the future that carries it; that future is held by
the awaiting frame, which the exception's traceback holds in turn. The cycle keeps the request's frames, and the
SDK's session and streams they reference, alive until the cyclic garbage collector runs, and makes it run more
often and for longer: on every call that ends in an expected failure (a job not found, a refused submission).
Returned as a value and raised here, with this frame's references dropped, the exception and the request's
objects are freed by reference counting when the request ends."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import anyio.to_thread

T = TypeVar("T")


def _outcome(call: Callable[..., T], *args: Any) -> tuple[T | None, Exception | None]:
    try:
        return call(*args), None
    except Exception as error:  # noqa: BLE001 - carried back and raised on the event loop
        return None, error


async def run_in_worker_thread(call: Callable[..., T], *args: Any) -> T:
    """`call(*args)` on a worker thread (anyio.to_thread.run_sync), raising what it raised."""
    result, error = await anyio.to_thread.run_sync(_outcome, call, *args)
    if error is None:
        return result  # type: ignore[return-value]
    try:
        raise error
    finally:
        del error  # the traceback holds this frame: without the name, nothing here holds the exception
