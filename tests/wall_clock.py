"""`--wall-clock`: run the whole test session with the wall clock moved, ticking (`make test-any-date`).

A test that only passes near the day it was written (an instant pinned in the past that an emulator later compares
with the real clock, a daily quota or lease that breaks over midnight, a TTL across a new year) fails here first.
time_machine moves `time.time`, `datetime.now` and their kin in this process and every xdist worker (each worker
reads the same option); `time.monotonic` and `perf_counter` stay real, so sleeps, timed waits and timeouts behave as
usual. A test's own `time_machine.travel` nests inside the session's travel and returns to it afterwards.
Subprocesses (the Lambda-shaped sandboxes, `make dev`) keep the real clock, which is why only the in-process tiers
run this way.
"""

from __future__ import annotations

import datetime as dt
import re

import pytest
import time_machine

# The moments a session can start at: a duration ahead of now ("+400d", "+36h"), or the last seconds of a year.
AHEAD = re.compile(r"^\+(?P<count>\d+)(?P<unit>[dhm])$")
UNITS = {"d": "days", "h": "hours", "m": "minutes"}
NEW_YEAR = re.compile(r"^new-year-(?P<seconds>\d+)s$")


def session_start(spec: str, now: dt.datetime) -> dt.datetime:
    """The instant a `--wall-clock` spec names, from the real `now`: `+<n>d|h|m` is that far ahead of it, and
    `new-year-<n>s` is n seconds before the next midnight UTC that starts a year."""
    if match := AHEAD.match(spec):
        return now + dt.timedelta(**{UNITS[match["unit"]]: int(match["count"])})
    if match := NEW_YEAR.match(spec):
        return dt.datetime(now.year + 1, 1, 1, tzinfo=dt.UTC) - dt.timedelta(seconds=int(match["seconds"]))
    raise pytest.UsageError(f"--wall-clock {spec!r}: expected +<n>d, +<n>h, +<n>m or new-year-<n>s")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--wall-clock",
        default=None,
        help="start the session's wall clock elsewhere, ticking: +400d (ahead of now) or new-year-30s",
    )


def pytest_configure(config: pytest.Config) -> None:
    spec = config.getoption("--wall-clock")
    if spec is None:
        return
    start = session_start(spec, dt.datetime.now(dt.UTC))
    traveller = time_machine.travel(start, tick=True)
    traveller.start()
    config.add_cleanup(traveller.stop)


def pytest_report_header(config: pytest.Config) -> str | None:
    spec = config.getoption("--wall-clock")
    return None if spec is None else f"wall clock: {spec}, now {dt.datetime.now(dt.UTC).isoformat(timespec='seconds')}"
