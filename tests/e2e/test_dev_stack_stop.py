"""A stop of the local stack (`make dev`'s Ctrl-C) waits for what is in flight, each piece for at most its own
function's timeout, and for nothing else: the template's longest timeout (SelfProbeKeyIssuer's 360 s) never holds an
idle stack, nor one whose only work is a short function that hangs."""

from __future__ import annotations

import logging
import threading
from typing import Any

# A generous deadline for a stop that should take seconds, far below the 365 s a stop once waited for.
STOP_DEADLINE_SECONDS = 60


def stop_in_background(stack: Any) -> threading.Thread:
    stopping = threading.Thread(target=stack.stop, name="test-stop", daemon=True)
    stopping.start()
    return stopping


def test_an_idle_stack_stops_in_a_few_seconds(start_stack):
    # Given the whole template running as make dev runs it: its event-source loops, schedules and TTL sweeps
    stack = start_stack(runtime="inprocess", run_threads=True)

    # When it is stopped with nothing in flight
    stopping = stop_in_background(stack)

    # Then the stop ends well within the deadline
    stopping.join(STOP_DEADLINE_SECONDS)
    assert not stopping.is_alive()
    assert stack.stopped


def test_a_hung_invocation_holds_the_stop_for_its_own_functions_timeout_only(start_stack, caplog):
    # Given a stack whose ProbeWorker times out after 5 s (the template's least), and one asynchronous ProbeWorker
    # invocation that hangs
    stack = start_stack(runtime="inprocess", run_threads=True, parameters={"ProbeWorkerTimeout": "5"})
    entered, release = threading.Event(), threading.Event()

    def hung(event: Any) -> Any:
        entered.set()
        release.wait(STOP_DEADLINE_SECONDS * 2)
        return None

    stack.environment.runtime("ProbeWorker").invoke = hung
    stack.async_invoker.submit("ProbeWorker", {"serverId": "srv-hung", "endpoint": "http://127.0.0.1:9/mcp"})
    assert entered.wait(30)

    # When the stack is stopped while it runs
    try:
        with caplog.at_level(logging.WARNING):
            stopping = stop_in_background(stack)
            stopping.join(STOP_DEADLINE_SECONDS)

            # Then the stop gave up on it after its function's timeout, not the template's longest, and said so
            assert not stopping.is_alive()
    finally:
        release.set()
    assert any("still running past its timeout" in record.getMessage() for record in caplog.records)
