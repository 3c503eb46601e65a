"""A job's tool run in a forked child (mcp_backend.jobs.apart): its result or its failure reaches the worker as if
it had run in the record's thread, an out-of-memory end is ToolOutOfMemory, and the child is the process the
kernel kills first, with AWS clients of its own."""

from __future__ import annotations

import os
import signal
import threading
from typing import Any

import pytest

from mcp_backend.aws import AwsClients
from mcp_backend.jobs.apart import run_apart
from mcp_backend.jobs.errors import ToolOutOfMemory
from mcp_backend.tools.errors import DatasetTemporarilyUnreachable, DatasetUnparseable

SECONDS = 30


def test_the_tools_result_comes_back_from_its_own_process():
    # Given a tool that answers with its process id / When it runs apart
    answer = run_apart(lambda: {"pid": os.getpid(), "rows": [1, 2]}, SECONDS)

    # Then the answer is its result, made in another process than the worker's
    assert answer["rows"] == [1, 2] and answer["pid"] != os.getpid()


@pytest.mark.parametrize(
    "error", [DatasetUnparseable("CSV dataset is empty"), DatasetTemporarilyUnreachable("timed out")]
)
def test_a_tool_error_is_raised_in_the_worker_with_its_type_and_message(error):
    # Given a tool that fails with a typed error (permanent or transient)
    def failing() -> dict[str, Any]:
        raise error

    # When it runs apart / Then the worker gets the same failure, so it decides retries as before
    with pytest.raises(type(error), match=str(error)) as raised:
        run_apart(failing, SECONDS)
    assert raised.value.transient is error.transient


def test_a_tool_killed_by_sigkill_or_refused_memory_is_out_of_memory():
    # Given a tool whose process the kernel kills, and one whose allocation fails
    def killed() -> dict[str, Any]:
        os.kill(os.getpid(), signal.SIGKILL)
        return {}

    def refused() -> dict[str, Any]:
        raise MemoryError

    # When each runs apart / Then each is the permanent ToolOutOfMemory, named as such
    for tool in (killed, refused):
        with pytest.raises(ToolOutOfMemory, match="out of memory") as raised:
            run_apart(tool, SECONDS)
        assert not raised.value.transient


def test_the_tools_process_is_the_first_the_kernel_kills_and_builds_its_own_clients():
    # Given an AWS client built in the worker before the run, while another thread holds the client cache's lock
    built: list[str] = []
    clients = AwsClients(factory=lambda service: built.append(service) or object())
    clients("s3")
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with clients._lock:
            held.set()
            release.wait()

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait()
    try:
        # When a tool runs apart and asks for the client
        answer = run_apart(
            lambda: {
                "oom_score_adj": open("/proc/self/oom_score_adj").read().strip(),
                "built": clients("s3") and built,
            },
            SECONDS,
        )
    finally:
        release.set()
        holder.join()

    # Then its process has the highest OOM score, and it built a client of its own (no wait on the held lock)
    assert answer["oom_score_adj"] == "1000"
    # (ids of objects in two processes may coincide, so the child reports what its factory built)
    assert answer["built"] == ["s3", "s3"] and built == ["s3"]


def test_a_tool_still_running_at_the_functions_timeout_ends_as_a_transient_failure():
    # Given a tool that never answers / When it runs apart with a one-second timeout
    def stuck() -> dict[str, Any]:
        threading.Event().wait()
        return {}

    # Then it is ended and the worker gets an unexpected (retried) failure, not out of memory
    with pytest.raises(RuntimeError, match="without an answer"):
        run_apart(stuck, 1)
