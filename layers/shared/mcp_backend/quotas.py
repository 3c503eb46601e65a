"""Quotas by tier that tools and the jobs service enforce (the request rate is the HTTP guard's: request_rate.py).

A refused request raises `QuotaExceeded`, whose message names the limit, the tier, the maximum and when the
quota frees up; it is written before anything else, so a refused job or registration leaves nothing behind.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any


class QuotaExceeded(Exception):
    """A tier's quota refuses the request."""

    def __init__(self, limit: str, tier: str, maximum: int, resets: str) -> None:
        super().__init__(f"{limit} limit of {maximum} for tier {tier} reached; {resets}")
        self.limit = limit
        self.tier = tier
        self.maximum = maximum
        self.resets = resets

    @property
    def error_type(self) -> str:
        return type(self).__name__

    def as_error(self) -> dict[str, Any]:
        """The error entry of one refused batch item."""
        return {"type": self.error_type, "message": str(self), "limit": self.limit, "tier": self.tier}


@dataclass(frozen=True)
class JobQuota:
    """What one caller may still submit: its tier's concurrent and daily job limits."""

    tier: str
    concurrent_jobs: int
    daily_jobs: int
    # A job holds its slot until it ends, or at most this long (a worker killed before recording the end).
    slot_max_seconds: int = 6 * 3600

    def concurrent_refused(self) -> QuotaExceeded:
        resets = "a slot frees when one of your PENDING or RUNNING jobs ends"
        return QuotaExceeded("concurrent_jobs", self.tier, self.concurrent_jobs, resets)

    def daily_refused(self, now: datetime) -> QuotaExceeded:
        return QuotaExceeded("daily_jobs", self.tier, self.daily_jobs, f"resets at {next_utc_midnight(now)}")


def next_utc_midnight(now: datetime) -> str:
    tomorrow = (now.astimezone(UTC) + timedelta(days=1)).date()
    return datetime(tomorrow.year, tomorrow.month, tomorrow.day, tzinfo=UTC).isoformat().replace("+00:00", "Z")


@dataclass(frozen=True)
class EndpointQuota:
    """How many probe endpoints one caller may have registered: its tier's cap."""

    tier: str
    endpoints: int

    def refused(self) -> QuotaExceeded:
        resets = "unregister one (unregister_endpoint) to register another"
        return QuotaExceeded("endpoints", self.tier, self.endpoints, resets)
