"""The dispatcher's tick spacing, read from ProbeScheduleExpression: the budget's turn moves on by ticks."""

from __future__ import annotations

import pytest

from mcp_backend.config import ProbeDispatcherSettings, load_settings

BASE = {"MONITOR_TABLE_NAME": "t", "PROBE_WORKER_FUNCTION_NAME": "w", "CALL_LOG_STREAM_NAME": "s"}


@pytest.mark.parametrize(
    ("expression", "seconds"),
    [
        ("rate(1 minute)", 60),
        ("rate(5 minutes)", 300),
        ("rate(2 hours)", 7200),
        ("rate(1 day)", 86400),
        ("cron(0/10 * * * ? *)", 60),
    ],
)
def test_a_rate_gives_its_spacing_and_a_cron_a_minute(expression, seconds):
    settings = load_settings(ProbeDispatcherSettings, {**BASE, "PROBE_SCHEDULE_EXPRESSION": expression})
    assert settings.tick_seconds == seconds
