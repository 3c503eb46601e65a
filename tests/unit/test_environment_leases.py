"""Environments whose owner was killed are ended by the next runtime that starts: a frozen (SIGSTOPped)
process group outlives its owner otherwise."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from devstack.runtime import leases, procfs

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads Linux /proc")

# An owner: starts an environment-like process group, leases it, freezes it, prints its id and waits.
OWNER = textwrap.dedent(
    """
    import os, signal, subprocess, sys, time
    from devstack.runtime import leases
    child = subprocess.Popen(["sleep", "300"], start_new_session=True)
    leases.take(child.pid, sandbox_root=None)
    os.killpg(child.pid, signal.SIGSTOP)
    print(child.pid, flush=True)
    time.sleep(300)
    """
)


@pytest.fixture
def lease_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(leases, "LEASES", tmp_path / "leases")
    return tmp_path / "leases"


def start_owner(lease_folder) -> tuple[subprocess.Popen[str], int]:
    code = (
        f"from devstack.runtime import leases; from pathlib import Path; leases.LEASES = Path({str(lease_folder)!r})\n"
    )
    owner = subprocess.Popen(
        [sys.executable, "-c", code + OWNER],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert owner.stdout is not None
    return owner, int(owner.stdout.readline())


def stopped(pid: int, seconds: float = 10.0) -> bool:
    """The process reached state T (a SIGSTOP is delivered asynchronously)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        fields = procfs.stat_fields(pid)
        if fields is not None and fields[procfs.STATE] == "T":
            return True
        time.sleep(0.02)
    return False


def gone(pid: int, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if procfs.start_time(pid) is None:
            return True
        time.sleep(0.02)
    return False


def test_a_frozen_environment_whose_owner_was_killed_is_ended_by_the_next_runtime(lease_folder):
    # Given an owner that leased a process group and froze it, then was killed with SIGKILL
    owner, pgid = start_owner(lease_folder)
    owner.kill()
    owner.wait()
    assert stopped(pgid)

    # When the next runtime starts and reaps
    reaped = leases.reap()

    # Then the orphaned group is ended and its lease removed
    assert reaped == [pgid]
    assert gone(pgid)
    assert list(lease_folder.iterdir()) == []


def test_an_environment_whose_owner_still_runs_is_left_alone(lease_folder):
    # Given an owner that is alive with its frozen, leased environment
    owner, pgid = start_owner(lease_folder)
    try:
        # When another runtime starts and reaps
        reaped = leases.reap()

        # Then nothing is ended: the owner will stop its own environment
        assert reaped == []
        assert stopped(pgid)
    finally:
        owner.kill()
        owner.wait()
        os.killpg(pgid, signal.SIGKILL)


def test_a_lease_whose_group_is_already_gone_is_only_removed(lease_folder):
    # Given a lease for a process group that ended, owned by a process that ended too
    child = subprocess.Popen(["true"], start_new_session=True)
    leases.take(child.pid, owner=child.pid)
    child.wait()

    # When a runtime reaps
    reaped = leases.reap()

    # Then nothing is signalled (the pid may belong to someone else by now), and the lease is gone
    assert reaped == []
    assert list(lease_folder.iterdir()) == []
