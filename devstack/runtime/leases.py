"""Leases on execution environments: each environment's process group is recorded with the process that
owns it (a `make dev`, a test run), so an environment whose owner died without stopping it (`kill -9`, a
killed CI job) is found and ended by the next runtime that starts on this machine. Without this an owner's
frozen environments (SIGSTOP) stay stopped forever.

A lease is a file named after the process group in one folder per user; it holds the owner's pid and start
time and the group leader's start time, so a reused pid is never mistaken for either.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import tempfile
from pathlib import Path

from devstack.runtime import procfs

LEASES = Path(tempfile.gettempdir()) / f"devstack-environments-{os.getuid()}"


def take(pgid: int, sandbox_root: Path | None = None, owner: int | None = None) -> Path:
    """Records that `owner` (this process by default) owns the process group `pgid`."""
    owner = os.getpid() if owner is None else owner
    LEASES.mkdir(mode=0o700, exist_ok=True)
    lease = LEASES / str(pgid)
    record = {
        "owner": owner,
        "ownerStart": procfs.start_time(owner),
        "leaderStart": procfs.start_time(pgid),
        "sandboxRoot": str(sandbox_root) if sandbox_root else None,
    }
    lease.write_text(json.dumps(record))
    return lease


def give_back(pgid: int) -> None:
    (LEASES / str(pgid)).unlink(missing_ok=True)


def reap() -> list[int]:
    """Ends every leased process group whose owner is gone and removes its sandbox; returns their ids."""
    reaped = []
    for lease in sorted(LEASES.glob("[0-9]*")) if LEASES.is_dir() else []:
        try:
            record = json.loads(lease.read_text())
            pgid = int(lease.name)
        except (OSError, ValueError):
            continue
        if procfs.start_time(record["owner"]) == record["ownerStart"] is not None:
            continue  # its owner still runs and will stop it
        if procfs.start_time(pgid) == record["leaderStart"] is not None:
            # SIGKILL ends stopped processes too; the group may already be gone.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
            reaped.append(pgid)
        if record.get("sandboxRoot"):
            root = Path(record["sandboxRoot"])
            shutil.rmtree(root, ignore_errors=True)
            root.with_name(root.name + "-hosts").unlink(missing_ok=True)
        lease.unlink(missing_ok=True)
    return reaped
