"""What the local stack and its benchmarks read about processes from Linux /proc: state, process group and
CPU time (proc(5), /proc/<pid>/stat), peak resident memory and the CPUs each thread may run on
(/proc/<pid>/status, /proc/<pid>/task/<tid>/status). Elsewhere, and for a
process that is gone, there is nothing to read."""

from __future__ import annotations

import os
from pathlib import Path

# Fields of /proc/<pid>/stat after the command name, counted from 0 (proc(5) numbers them from 3).
STATE, PPID, PGRP, UTIME, STIME, CUTIME, CSTIME, STARTTIME = 0, 1, 2, 11, 12, 13, 14, 19


def stat_fields(pid: int | str) -> list[str] | None:
    """The process's stat fields after its command name (which may hold spaces), or None once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def all_stat_fields() -> dict[int, list[str]]:
    """Every live process's stat fields, by pid."""
    found = {}
    for entry in Path("/proc").glob("[0-9]*"):
        fields = stat_fields(entry.name)
        if fields is not None:
            found[int(entry.name)] = fields
    return found


def start_time(pid: int) -> int | None:
    """When the process started (clock ticks since boot): with the pid, it names one process, never a later one
    that reused the pid. None once it is gone."""
    fields = stat_fields(pid)
    return None if fields is None or fields[STATE] == "Z" else int(fields[STARTTIME])


def ticks_to_seconds(ticks: int) -> float:
    return ticks / os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of one process, or None once it is gone."""
    fields = stat_fields(pid)
    return None if fields is None else ticks_to_seconds(int(fields[UTIME]) + int(fields[STIME]))


def group_states(pgid: int) -> dict[int, str]:
    """The state letter of every process in a process group, zombies left out."""
    return {
        pid: fields[STATE]
        for pid, fields in all_stat_fields().items()
        if fields[STATE] != "Z" and int(fields[PGRP]) == pgid
    }


def peak_rss_kb(pid: int) -> int:
    """VmHWM of a process (0 once it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def allowed_cpus_by_thread(pid: int) -> dict[int, str]:
    """Every thread of a process with the CPUs it may run on (Cpus_allowed_list, e.g. "1" or "0-1"), by tid;
    empty once it is gone."""
    allowed = {}
    for task in Path(f"/proc/{pid}/task").glob("[0-9]*"):
        try:
            for line in (task / "status").read_text().splitlines():
                if line.startswith("Cpus_allowed_list:"):
                    allowed[int(task.name)] = line.split(":", 1)[1].strip()
        except OSError:
            pass  # the thread ended meanwhile
    return allowed


def thread_cpu_ns(pid: int) -> dict[int, int]:
    """CPU time each live thread of a process has run, in nanoseconds (the first field of
    /proc/<pid>/task/<tid>/schedstat), by tid: finer than the clock ticks of /proc/<pid>/stat; empty once the
    process is gone."""
    times = {}
    for task in Path(f"/proc/{pid}/task").glob("[0-9]*"):
        try:
            times[int(task.name)] = int((task / "schedstat").read_text().split()[0])
        except (OSError, IndexError, ValueError):
            pass  # the thread ended meanwhile
    return times
