"""Job admission: whether a caller's tier lets it submit one more job, decided here, above JobTable's owner
(jobs/store.py), which only reads and writes. What one instance knows between DynamoDB writes: the daily jobs it
has leased and not yet used, and the jobs it submitted in the last few seconds.

Daily jobs are leased in blocks with the request rate's algorithm (mcp_backend.block_leases): one conditional
UpdateItem of the caller's day item takes a block of the day's jobs, and the instance admits that many without
another write.
A block is a tenth of what the day has left when it is leased (1 to 50), so leases shrink as the day fills
and never hand one instance all of it. The count in DynamoDB is the sum of every lease and a lease past the
limit is refused by DynamoDB itself: all instances together never admit more than the day's limit. Jobs an
instance leased and did not submit are lost when the day ends or the instance goes away: the quota errs on
refusing, by at most the unused part of each instance's last lease that day.

Concurrent jobs are the caller's PENDING and RUNNING job items (the sparse index `ActiveJobsByUser`), plus the
jobs this instance submitted in the last `RECENT_SECONDS` (an index lags its table by a fraction of a second).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from mcp_backend.jobs.models import JobMessage
from mcp_backend.jobs.store import JobStore
from mcp_backend.quotas import JobQuota

# A lease takes this share of what is left of the day's jobs (at least 1, at most MAX_DAILY_BLOCK).
DAILY_BLOCKS = 10
MAX_DAILY_BLOCK = 50
# How long an instance counts a job it submitted as in flight on its own, whether or not the index shows it yet.
RECENT_SECONDS = 10.0


def daily_block(limit: int, counted: int | None) -> int:
    """How many of the day's jobs one lease takes: a tenth of what is left (`counted` leased so far, None when
    unknown: the whole limit is assumed left), 1 to MAX_DAILY_BLOCK."""
    room = limit - (counted or 0)
    return max(1, min(MAX_DAILY_BLOCK, math.ceil(room / DAILY_BLOCKS)))


@dataclass
class CallerQuota:
    """One caller's quota state on this instance. `lock` is held across a submission's reads and writes, so
    the caller's submissions on this instance are admitted one at a time."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    day: str = ""
    leased: int = 0  # daily jobs leased and not yet used, for `day`
    counted: int | None = None  # the day's count in DynamoDB after this instance's last lease (None: unknown)
    spent: bool = False  # DynamoDB holds the whole day's limit: nothing more can be leased that day
    recent: dict[str, float] = field(default_factory=dict)  # job id -> when this instance submitted it

    def take_daily(self, day: str) -> bool:
        """Use one leased job of `day`; False when a lease is needed (or the day is spent: see `spent`)."""
        if self.day != day:
            self.day, self.leased, self.counted, self.spent = day, 0, None, False
        if self.leased > 0:
            self.leased -= 1
            return True
        return False

    def granted(self, leased: int, counted: int) -> None:
        """A lease of `leased` jobs, leaving the day's count at `counted` (0 leased: the day is spent)."""
        self.leased += leased
        self.counted = counted
        self.spent = leased == 0

    def give_back(self) -> None:
        """A job taken from the lease was not submitted after all (a repeat): it stays this instance's to use."""
        self.leased += 1

    def in_flight_here(self, now: float) -> set[str]:
        """The jobs this instance submitted recently (older ones are in the index by now)."""
        self.recent = {job_id: at for job_id, at in self.recent.items() if now - at < RECENT_SECONDS}
        return set(self.recent)


class QuotaLeases:
    """Every caller's quota state on this instance; thread-safe (the endpoint submits from worker threads)."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._callers: dict[str, CallerQuota] = {}
        self._day = ""
        self._lock = threading.Lock()

    def caller(self, user_id: str, day: str) -> CallerQuota:
        with self._lock:
            if day != self._day:
                # A new day: yesterday's leases are worthless; keep only callers with recent jobs.
                self._callers = {user: state for user, state in self._callers.items() if state.recent}
                self._day = day
            state = self._callers.get(user_id)
            if state is None:
                state = self._callers[user_id] = CallerQuota()
            return state


class JobAdmission:
    """Records a job PENDING if the caller's tier admits it, with no write in the common case: the caller's PENDING
    and RUNNING jobs are counted (the store's index read, and this instance's recent jobs), and one of the day's
    jobs is taken from this instance's lease (one conditional write per block). Over either limit, QuotaExceeded
    (naming the limit and the tier) and nothing is written; a repeated job id takes no quota."""

    def __init__(self, leases: QuotaLeases | None = None) -> None:
        self.leases = leases if leases is not None else QuotaLeases()

    def record(self, store: JobStore, job: JobMessage, quota: JobQuota | None) -> bool:
        """True when the job was recorded in `store`; False for an id that exists already (a repeat)."""
        if quota is None:
            return store.create_pending(job)
        now = datetime.now(UTC)
        day = now.date().isoformat()
        caller = self.leases.caller(job.user_id, day)
        with caller.lock:
            held_here = caller.in_flight_here(self.leases.clock())
            if store.count_in_flight(job.user_id, held_here, quota) >= quota.concurrent_jobs:
                if store.get(job.job_id) is not None:
                    return False  # a repeat: answered from the job's state, takes no quota
                raise quota.concurrent_refused()
            if not caller.take_daily(day):
                self._lease_daily(store, job.user_id, caller, day, quota.daily_jobs)
                if not caller.take_daily(day):
                    if store.get(job.job_id) is not None:
                        return False
                    raise quota.daily_refused(now)
            if not store.create_pending(job, active=True):
                caller.give_back()
                return False
            caller.recent[job.job_id] = self.leases.clock()
        return True

    @staticmethod
    def _lease_daily(store: JobStore, user_id: str, caller: CallerQuota, day: str, limit: int) -> None:
        """Lease a block of the day's jobs into `caller` (nothing when the day is spent, or the lease kept losing
        races to other instances': the submission is refused, the next one tries again)."""
        if caller.spent:
            return
        block = daily_block(limit, caller.counted)
        leased = store.lease_daily(user_id, day, limit, block, lambda counted: daily_block(limit, counted))
        if leased is not None:
            caller.granted(leased.taken, leased.counted)
