"""EventBridge schedules (rules with a ScheduleExpression, Scheduler schedules): which fire by themselves (rate
expressions) and which only on demand (`make fire`), and the event a scheduled rule delivers."""

from __future__ import annotations

import datetime as dt
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from devstack.stack.resources import LocalStack

_RATE = re.compile(r"^rate\((\d+)\s+(minute|minutes|hour|hours|day|days)\)$")
_UNIT_SECONDS = {"minute": 60, "hour": 3600, "day": 86400}


@dataclass
class Schedule:
    logical_id: str
    expression: str
    targets: list[dict[str, Any]]
    period: float | None  # None: cron, fired only on demand
    next_fire: float = 0.0


def schedules_of(
    stack: LocalStack, clock: Callable[[], dt.datetime], notice: Callable[[str, str], None]
) -> dict[str, Schedule]:
    """The stack's enabled schedules by logical id; a rate schedule first fires one period from now."""
    schedules: dict[str, Schedule] = {}

    def add(logical_id: str, expression: str, targets: list[dict[str, Any]]) -> None:
        match = _RATE.match(expression.strip())
        period = int(match.group(1)) * _UNIT_SECONDS[match.group(2).rstrip("s")] if match else None
        if period is None:
            notice(logical_id, f"ScheduleExpression {expression} fires only on demand (`make fire`)")
        schedules[logical_id] = Schedule(logical_id, expression, targets, period, clock().timestamp() + (period or 0))

    for logical_id, rule in stack.active("AWS::Events::Rule").items():
        if "ScheduleExpression" in rule and rule.get("State", "ENABLED") == "ENABLED":
            add(logical_id, rule["ScheduleExpression"], rule.get("Targets", []))
    for logical_id, schedule in stack.active("AWS::Scheduler::Schedule").items():
        if schedule.get("State", "ENABLED") == "ENABLED":
            add(logical_id, schedule["ScheduleExpression"], [schedule["Target"]])
    return schedules


def scheduled_event(schedule: Schedule, stack: LocalStack, at: dt.datetime) -> dict[str, Any]:
    """The event a scheduled rule delivers to a target with no Input of its own."""
    return {
        "version": "0",
        "id": f"{schedule.logical_id}-{time.time_ns()}",
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": "123456789012",
        "time": at.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": "us-east-1",
        "resources": [stack.arn("events", f"rule/{schedule.logical_id}")],
        "detail": {},
    }
