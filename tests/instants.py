"""Instants for tests that move a clock, taken from the real clock (or the session's, under `--wall-clock`), never
pinned to a date: an item, message or token made at a pinned instant is later compared with the real clock by an
emulator or a library (retention, TTL, visibility, expiry), and the test starts failing days after it was written."""

from __future__ import annotations

import datetime as dt
import time


def day_start(days_ago: int) -> dt.datetime:
    """Midnight UTC `days_ago` days before today: a test that travels up to a day or two ahead of it stays in
    the past, and one that needs a day's boundary (daily quotas) knows where it is."""
    today = dt.datetime.now(dt.UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return today - dt.timedelta(days=days_ago)


def minute_start() -> float:
    """The start of the current minute in epoch seconds, for clocks injected into per-minute windows."""
    return float(int(time.time()) // 60 * 60)
