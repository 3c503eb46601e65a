"""Requests per minute per principal, held across every instance of the endpoint: RateLimitTable's request
counters (its call slots are call_slots.py's). The lease is mcp_backend.block_leases's algorithm.

One item per principal and minute (a fixed window aligned to the epoch minute) counts the requests that
instances have *leased*. An instance leases a block of requests with one conditional `UpdateItem` (ADD the
block to the count under the condition that the count stays within the tier's limit; when less than a block
is left, it leases what is left) and then admits that many requests of the principal locally, without a
write, until the block is spent or the window ends. The count in DynamoDB is the sum of every lease, and a
lease that would pass the limit is refused by DynamoDB itself, so all instances together never admit more
than the limit in a window. Requests an instance leased but did not use are lost when the window ends (or
the instance goes away): the limiter errs on refusing, by at most one block less one per instance that
served the principal in the window. A refused request changes nothing and learns when the window ends (the
429's Retry-After); once DynamoDB says the window is spent, the instance refuses the rest of it locally. A
lease that keeps losing races to other instances' leases is given up after a few tries (Retry-After: 1 s).

An instance that leases ahead (the endpoint does) starts leasing the next requests in the background once half
of its lease is used, so a request rarely waits on DynamoDB. A lease ahead takes a block, or about a second of
the rate at which this instance has been admitting the principal's requests if that is more, never more than a
tenth of the limit: a principal sending hundreds of requests a second to one instance costs about one write a
second, not one per block. What an instance can strand at a window's end is then at most a lease and a half:
a block and a half for a principal it serves slowly, about a second and a half of its own traffic for a busy
one. A lease ahead that fails changes nothing: the next request that finds no lease leases itself, and is
refused (503) if DynamoDB still fails.

When DynamoDB cannot be reached, the request is refused (`RateLimitUnavailable`: the guard answers 503),
never admitted unlimited. Items expire by TTL a few minutes after their window. A fixed window lets a client
spend its limit at the end of one minute and again at the start of the next (at most twice the limit over
any 60 s).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mcp_backend.aws import botocore_errors, client_or_lazy
from mcp_backend.block_leases import lease_block

WINDOW_SECONDS = 60
# Kept past its window so a late request of the window still finds it; DynamoDB deletes expired items
# within a few days of expiry, and counts only the live window (the key names the window).
ITEM_TTL_SECONDS = 5 * WINDOW_SECONDS
# A block is a tenth of the limit: about ten writes per principal and window whatever the tier, while an
# instance that stops serving a principal strands at most a tenth of its limit. The cap bounds what a large
# tier strands per instance (50 requests) at the price of more writes (6,000 a minute: 120 leases).
BLOCKS_PER_WINDOW = 10
MAX_BLOCK = 50
# A lease ahead covers about this long of the principal's recent rate on this instance (at least a block).
LEASE_AHEAD_SECONDS = 1.0
# Concurrent instances leasing the last requests of a window can each find the count moved; after this many
# conditional writes the request is refused rather than keep the caller waiting (the next one tries again).
MAX_LEASE_ATTEMPTS = 3


def block_size(limit: int) -> int:
    """How many requests one lease takes for a tier allowing `limit` a window."""
    return max(1, min(MAX_BLOCK, math.ceil(limit / BLOCKS_PER_WINDOW)))


def lease_ahead_size(limit: int, requests_per_second: float) -> int:
    """How many requests a lease ahead takes: a block, or `LEASE_AHEAD_SECONDS` of the rate this instance admits
    the principal's requests at if that is more, never more than a tenth of the limit."""
    block = block_size(limit)
    tenth = max(block, math.ceil(limit / BLOCKS_PER_WINDOW))
    wanted = requests_per_second * LEASE_AHEAD_SECONDS
    if wanted <= block:
        return block
    return tenth if wanted >= tenth else math.ceil(wanted)


@dataclass(frozen=True)
class RateDecision:
    allowed: bool
    limit: int
    retry_after_seconds: int = 0  # refused: seconds until the window ends (at least 1)


class RateLimitUnavailable(RuntimeError):
    """The counter could not be read or written: the endpoint refuses (503) rather than serve unlimited."""


@dataclass
class _Lease:
    """What this instance may still admit for one principal in one window."""

    window_start: int
    remaining: int = 0
    size: int = 0  # requests the last lease took: the next is leased ahead once half of it is left
    leased_at: float = 0.0  # when the last lease was granted
    admitted: int = 0  # requests admitted since then: with `leased_at`, the principal's rate on this instance
    spent: bool = False  # DynamoDB holds the whole limit for the window: nothing more can be leased in it
    leasing_ahead: bool = False  # a lease of the next block is under way in the background
    lock: threading.Lock | None = None  # held while leasing, so one thread per principal writes at a time


# Runs a lease ahead off the request path: the endpoint's starts a daemon thread (`in_background`); tests inject one
# that runs it when they say, so which request a lease serves does not depend on threads' timing.
LeaseAhead = Callable[[Callable[[], None]], None]


class RequestRateLimiter:
    """Thread-safe: the endpoint takes requests from worker threads (`anyio.to_thread`), concurrently."""

    def __init__(
        self,
        table_name: str,
        client: Any = None,
        clock: Callable[[], float] = time.time,
        lease_ahead: LeaseAhead | None = None,
    ) -> None:
        """lease_ahead: how to run the next block's lease off the request path (e.g. `in_background`); None
        leases only when a request finds no lease left."""
        self.table_name = table_name
        self._client = client_or_lazy(client, "dynamodb")
        self._clock = clock
        self._lease_ahead = lease_ahead
        self._leases: dict[str, _Lease] = {}
        self._window = 0  # the newest window seen: leases of older ones are dropped when it changes
        self._lock = threading.Lock()  # guards `_leases` and every lease's counts; never held across I/O

    def admit_locally(self, principal_id: str, limit: int) -> RateDecision | None:
        """The decision this instance can make without DynamoDB (a leased request, or a spent window);
        None when a lease is needed (`take`). Cheap: no I/O, safe on the event loop."""
        now = self._clock()
        window_start = _window_start(now)
        with self._lock:
            lease = self._leases.get(principal_id)
            if lease is None or lease.window_start != window_start:
                return None
            decision = self._admit(lease, limit, now)
            # Only after an admitted request: one that finds no lease leases itself (`take`).
            ahead = decision is not None and decision.allowed and self._due_ahead(lease, limit)
        if ahead:
            self._start_lease_ahead(principal_id, lease, limit)
        return decision

    def take(self, principal_id: str, limit: int) -> RateDecision:
        """Admit one request of `principal_id` in the current window, leasing a block from DynamoDB when this
        instance holds none; refused once `limit` are leased in the window across all instances. Blocking."""
        now = self._clock()
        window_start = _window_start(now)
        with self._lock:
            lease = self._current_lease(principal_id, window_start)
            decision = self._admit(lease, limit, now)
            if decision is not None:
                return decision
            lock = lease.lock = lease.lock or threading.Lock()
        with lock:
            with self._lock:  # another thread may have leased while this one waited
                decision = self._admit(lease, limit, now)
            if decision is not None:
                return decision
            leased = self._lease(principal_id, window_start, limit, block_size(limit))
            if leased is None:  # not spent, only contended: the caller may try again at once
                return RateDecision(allowed=False, limit=limit, retry_after_seconds=1)
            with self._lock:
                self._granted(lease, leased)
                lease.spent = leased == 0
                return self._admit(lease, limit, now) or _refused(limit, window_start, now)

    def _due_ahead(self, lease: _Lease, limit: int) -> bool:
        """Whether to lease the next block now (under self._lock): half of a block left, none under way."""
        if self._lease_ahead is None or lease.spent or lease.leasing_ahead:
            return False
        if lease.remaining > max(lease.size, block_size(limit)) // 2:
            return False
        lease.leasing_ahead = True
        return True

    def _start_lease_ahead(self, principal_id: str, lease: _Lease, limit: int) -> None:
        assert self._lease_ahead is not None
        with self._lock:
            elapsed = self._clock() - lease.leased_at
            # A clock that has not moved (a burst, or a test's frozen clock) reads as the fastest rate.
            rate = lease.admitted / elapsed if elapsed > 0 else math.inf
        size = lease_ahead_size(limit, rate)
        self._lease_ahead(lambda: self._lease_next_block(principal_id, lease, limit, size))

    def _lease_next_block(self, principal_id: str, lease: _Lease, limit: int, size: int) -> None:
        with self._lock:
            lock = lease.lock = lease.lock or threading.Lock()
        leased: int | None = None
        try:
            with lock:
                leased = self._lease(principal_id, lease.window_start, limit, size)
        except RateLimitUnavailable:
            leased = None  # a request that finds no lease leases itself, and answers 503 if this persists
        finally:
            with self._lock:
                if leased:
                    self._granted(lease, leased)
                lease.spent = lease.spent or leased == 0
                lease.leasing_ahead = False

    def _granted(self, lease: _Lease, leased: int) -> None:
        """Add a granted lease (under self._lock), and start measuring the rate anew from it."""
        lease.remaining += leased
        lease.size = leased
        lease.leased_at = self._clock()
        lease.admitted = 0

    def _current_lease(self, principal_id: str, window_start: int) -> _Lease:
        if window_start > self._window:
            # A new window: leases of past windows are worthless (and would pile up, one per principal seen).
            self._leases = {p: held for p, held in self._leases.items() if held.window_start >= window_start}
            self._window = window_start
        lease = self._leases.get(principal_id)
        if lease is None or lease.window_start != window_start:
            lease = self._leases[principal_id] = _Lease(window_start)
        return lease

    @staticmethod
    def _admit(lease: _Lease, limit: int, now: float) -> RateDecision | None:
        if lease.remaining > 0:
            lease.remaining -= 1
            lease.admitted += 1
            return RateDecision(allowed=True, limit=limit)
        if lease.spent:
            return _refused(limit, lease.window_start, now)
        return None

    def _lease(self, principal_id: str, window_start: int, limit: int, block: int) -> int | None:
        """Lease up to `block` of the window's requests: how many were leased (0: the window is spent;
        None: the count kept moving under concurrent leases, this request is refused)."""
        try:
            leased = lease_block(
                self._client,
                self.table_name,
                {"id": {"S": f"requests#{principal_id}#{window_start}"}},
                "requests",
                limit,
                block,
                window_start + ITEM_TTL_SECONDS,
                lambda counted: limit - counted,  # less than a block is left: lease what is left, if anything
                MAX_LEASE_ATTEMPTS,
            )
        except botocore_errors.ClientError as error:
            raise RateLimitUnavailable(error.response.get("Error", {}).get("Code", "ClientError")) from None
        except botocore_errors.BotoCoreError as error:
            raise RateLimitUnavailable(type(error).__name__) from None
        return None if leased is None else leased.taken


def _window_start(now: float) -> int:
    return int(now // WINDOW_SECONDS) * WINDOW_SECONDS


def _refused(limit: int, window_start: int, now: float) -> RateDecision:
    retry_after = max(1, math.ceil(window_start + WINDOW_SECONDS - now))
    return RateDecision(allowed=False, limit=limit, retry_after_seconds=retry_after)


def in_background(lease: Callable[[], None]) -> None:
    """Run a lease ahead on its own daemon thread (the endpoint's choice; tests run it inline)."""
    threading.Thread(target=lease, name="rate-limit-lease-ahead", daemon=True).start()
