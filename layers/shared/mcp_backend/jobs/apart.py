"""A job's tool run in a process of its own: one record that exhausts memory ends alone, never its batch.

ToolWorker runs a batch's records at once, in threads of one process. An allocation that fails raises
MemoryError in one thread (the record fails alone already), but Lambda's memory limit is enforced by the
kernel: when the function passes it, the OOM killer ends the runtime process, and with it every record of
the batch, each then retried. So each run's tool is called in a child forked from its record thread
(`run_apart`): the child's `oom_score_adj` is 1000, the highest, so the kernel picks it, not the runtime
(https://docs.kernel.org/filesystems/proc.html, oom_score_adj). The parent reads the child's answer over a
pipe and waits for it: the tool's result, or its exception raised again in the parent; a child killed by
SIGKILL (the OOM killer's signal) or that raised MemoryError is `ToolOutOfMemory`, a permanent failure, so
its job fails alone with that reason and its message goes to the DLQ. Everything around the tool (the
claim, the result's write, the call log) stays in the parent.

The cost is one fork per record: the child shares the parent's pages copy-on-write, so it costs the page
tables and the pages the tool writes (docs/job-pipeline.md has the figures). The child starts with only
the forking thread: AWS clients built before the fork are dropped in the child (mcp_backend.aws rebuilds
them, with fresh locks and connections), so no lock another thread held and no connection the parent uses
is shared (the span exporter too: mcp_backend.tracing opens the child's own connection, and the child
exports its spans before it ends). The child ends with `os._exit`: nothing of the parent's shutdown runs twice.
"""

from __future__ import annotations

import os
import pickle
import signal
import warnings
from collections.abc import Callable
from typing import Any, NoReturn

from mcp_backend.jobs.errors import ToolOutOfMemory
from mcp_backend.observability import logger
from mcp_backend.tracing.setup import flush as flush_spans

OOM_SCORE_ADJ = "/proc/self/oom_score_adj"
# The child's answer: (kind, value), pickled. A child that answers nothing ended another way.
RESULT, RAISED, OUT_OF_MEMORY = "result", "raised", "out-of-memory"

# Python 3.12+ warns on fork() in a process with threads (a lock held by another thread stays held in the child):
# the child here takes only locks made for it (mcp_backend.aws, logging's own at-fork handling).
warnings.filterwarnings("ignore", message=r".*use of fork\(\) may lead to deadlocks", category=DeprecationWarning)


def run_apart(call: Callable[[], dict[str, Any]], seconds: int) -> dict[str, Any]:
    """`call()` in a forked child: its result, or its exception raised here; ToolOutOfMemory when the child ran
    out of memory (MemoryError) or was killed by SIGKILL. Blocks the calling thread until the child ends, which
    is within `seconds` (the function's timeout): a child still running then is ended by SIGALRM."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        _child(call, read_end, write_end, seconds)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        answer = pipe.read()
    _, status = os.waitpid(pid, 0)
    return _outcome(answer, status)


def _child(call: Callable[[], dict[str, Any]], read_end: int, write_end: int, seconds: int) -> NoReturn:
    try:
        # No handler: SIGALRM ends the process. A child that a lock of the parent's left waiting (module docstring)
        # ends with the run, never outlives the invocation's claim on the job.
        signal.alarm(seconds)
        os.close(read_end)
        _first_to_be_killed()
        try:
            answer: tuple[str, Any] = (RESULT, call())
        except MemoryError:
            answer = (OUT_OF_MEMORY, None)
        except BaseException as error:  # noqa: BLE001 - every outcome goes back to the parent, which raises it
            answer = (RAISED, error)
        try:
            data = pickle.dumps(answer)
        except Exception as error:  # noqa: BLE001 - an exception that does not pickle: its type, as unexpected
            data = pickle.dumps((RAISED, RuntimeError(f"{type(error).__name__} in the tool's process")))
        with os.fdopen(write_end, "wb") as pipe:
            pipe.write(data)
        flush_spans()  # the spans the tool made here: the child ends without the parent's flush
    finally:
        os._exit(0)


def _first_to_be_killed() -> None:
    """Raise this process's OOM score to the highest (raising needs no privilege); best effort."""
    try:
        with open(OOM_SCORE_ADJ, "w") as adjust:
            adjust.write("1000")
    except OSError:
        logger.warning("the tool's process could not raise its OOM score")


def _outcome(answer: bytes, status: int) -> dict[str, Any]:
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL:
        raise ToolOutOfMemory.of_run()
    if not answer:  # a transient failure: the message's next receive runs it again
        raise RuntimeError(f"the tool's process ended without an answer (wait status {status})")
    kind, value = pickle.loads(answer)  # noqa: S301 - written by this process's own child, over its own pipe
    if kind == OUT_OF_MEMORY:
        raise ToolOutOfMemory.of_run()
    if kind == RAISED:
        raise value
    return dict(value)
