"""Requests per minute per principal, and the calls a principal runs at once (InFlightSlots, at the end), held
across every instance of the endpoint: RateLimitTable's owner.

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

import functools
import math
import random
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mcp_backend.aws import botocore_errors, client_or_lazy
from mcp_backend.block_leases import lease_block
from mcp_backend.observability import logger

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


# -- calls in flight ---------------------------------------------------------------------------------------------
# Added to the hold a call asks for (its longest run): instances' clocks may differ by up to this without a slot
# freeing while its call runs. A slot whose holder never gives it back (a crashed instance, or one frozen before it
# wrote the release) is free once the hold and this margin have passed.
SLOT_HOLD_MARGIN_SECONDS = 10
# A refused call may retry once a running one ends; calls that hold slots end within their deadline.
SLOT_RETRY_AFTER_SECONDS = 5
# A slot whose call ended stays with its instance this long, so the principal's next call there starts without a
# write: what another instance may wait for a slot nobody is using.
SLOT_LINGER_SECONDS = 10
# A kept slot is reused only while its hold has this long left: time for the write that extends it to land.
SLOT_REUSE_MARGIN_SECONDS = 5


@dataclass(frozen=True)
class SlotLease:
    """One held slot: its item and the holder id only its release may clear."""

    key: str
    holder: str
    principal: str = ""


@dataclass
class _KeptSlot:
    """A slot this instance holds: in use by one call (`busy`), or kept after its call until `expires`."""

    key: str
    holder: str
    expires: int  # the hold DynamoDB has (epoch seconds), as last written by this instance
    busy: bool = True
    # Held from a call's take until its write lands, and by a give-back while it writes: one slot's writes land in
    # the order its calls made them, so an older give-back never shortens a newer call's hold.
    writing: threading.Lock = field(default_factory=threading.Lock)


class InFlightSlots:
    """The calls of one principal that may run at once across every instance of the endpoint: `cap` slot items
    per principal (`inflight#<principal>#<n>`), each held by one call at a time, taken with a conditional write
    (free, its hold expired, or this instance's own) that every other instance sees at once.

    A call's slot stays with its instance for `SLOT_LINGER_SECONDS` after the call ends (the give-back writes
    that shorter hold instead of freeing it), and the principal's next call on that instance starts on it with
    no DynamoDB request: the write that extends the hold to the call's longest run runs off the request path
    (`extend_off_path`), before the call's give-back, which waits for it. Bounded error: a slot nobody uses stays
    held by its instance for at most `SLOT_LINGER_SECONDS`; a kept slot is started on only while its last
    written hold has `SLOT_REUSE_MARGIN_SECONDS` left, so a table that cannot be reached refuses an instance's
    calls (fail closed) at most that long after its last write; an extension that fails drops the slot (the
    call it was for runs on, logged). A slot whose holder never gave it back (a crash) is free again when its
    hold expires."""

    def __init__(
        self,
        table_name: str,
        client: Any = None,
        clock: Callable[[], float] = time.time,
        first_slot: Callable[[int], int] = random.randrange,
        extend_off_path: LeaseAhead | None = None,
    ) -> None:
        """extend_off_path: how to run a kept slot's extension (the endpoint: `in_background`); None runs it
        inline, within `take`."""
        self.table_name = table_name
        self._client = client_or_lazy(client, "dynamodb")
        self._clock = clock
        # Where a principal's calls start looking: spread, so concurrent takes rarely contend for one slot.
        self._first_slot = first_slot
        self._extend_off_path = extend_off_path
        self._kept: dict[str, dict[str, _KeptSlot]] = {}  # principal -> slot key -> the slot
        self._lock = threading.Lock()  # guards `_kept`; never held across I/O

    def take(self, principal_id: str, cap: int, hold_seconds: float) -> SlotLease | None:
        """A slot of the principal's `cap`, held for at most `hold_seconds`: a kept one without a request, else a
        free one; None when all are held. Raises RateLimitUnavailable when DynamoDB cannot be asked (the caller
        refuses: fail closed)."""
        now = int(self._clock())
        until = now + math.ceil(hold_seconds) + SLOT_HOLD_MARGIN_SECONDS
        kept = self._reuse(principal_id, cap, now)
        if kept is not None:
            extend = functools.partial(self._extend, principal_id, kept, until)
            if self._extend_off_path is None:
                extend()
            else:
                self._extend_off_path(extend)
            return SlotLease(kept.key, kept.holder, principal_id)
        with self._lock:
            mine = dict(self._kept.get(principal_id, {}))
        start = self._first_slot(cap)
        for offset in range(cap):
            key = f"inflight#{principal_id}#{(start + offset) % cap}"
            own = mine.get(key)
            if own is not None and own.busy and own.expires > now:
                continue  # one of this instance's running calls holds it (past its hold, that call is gone)
            holder = uuid.uuid4().hex
            if not self._write_hold(key, holder, until, now, own.holder if own is not None else None):
                continue
            with self._lock:
                self._kept.setdefault(principal_id, {})[key] = _KeptSlot(key, holder, until)
            return SlotLease(key, holder, principal_id)
        return None

    def give_back(self, lease: SlotLease) -> None:
        """The call ended: its slot stays with this instance for `SLOT_LINGER_SECONDS` (one write, after the
        answer). Never raises: a slot not given back frees itself when its hold expires."""
        principal_id = lease.principal
        with self._lock:
            kept = self._kept.get(principal_id, {}).get(lease.key)
        if kept is None or kept.holder != lease.holder:
            return  # lost meanwhile (an extension failed, or the hold expired and another call took it)
        with kept.writing:  # after the extension of this call's own take, if one is under way
            linger = int(self._clock()) + SLOT_LINGER_SECONDS
            try:
                self._client.update_item(
                    TableName=self.table_name,
                    Key={"id": {"S": lease.key}},
                    UpdateExpression="SET expiresAt = :linger",
                    ConditionExpression="holder = :holder",
                    ExpressionAttributeValues={":linger": {"N": str(linger)}, ":holder": {"S": lease.holder}},
                )
            except (botocore_errors.ClientError, botocore_errors.BotoCoreError) as error:
                self._drop(principal_id, kept)
                logger.warning("call slot not given back; it frees itself", extra={"error_type": type(error).__name__})
                return
            with self._lock:
                kept.expires, kept.busy = linger, False

    def _reuse(self, principal_id: str, cap: int, now: int) -> _KeptSlot | None:
        """A kept slot of this instance to start the call on, marked busy with its write lock taken; None if none."""
        with self._lock:
            for kept in self._kept.get(principal_id, {}).values():
                if int(kept.key.rsplit("#", 1)[1]) >= cap:
                    continue  # the cap was lowered since: only its first slots count
                if not kept.busy and kept.expires >= now + SLOT_REUSE_MARGIN_SECONDS and kept.writing.acquire(False):
                    kept.busy = True
                    return kept
        return None

    def _extend(self, principal_id: str, kept: _KeptSlot, until: int) -> None:
        """Hold a kept slot until the new call's longest run ends; releases the slot's write lock the take acquired."""
        try:
            self._client.update_item(
                TableName=self.table_name,
                Key={"id": {"S": kept.key}},
                UpdateExpression="SET expiresAt = :expires",
                ConditionExpression="holder = :holder",
                ExpressionAttributeValues={":expires": {"N": str(until)}, ":holder": {"S": kept.holder}},
            )
            with self._lock:
                kept.expires = until
        except (botocore_errors.ClientError, botocore_errors.BotoCoreError) as error:
            self._drop(principal_id, kept)
            logger.warning("kept call slot not extended; dropped", extra={"error_type": type(error).__name__})
        finally:
            kept.writing.release()

    def _drop(self, principal_id: str, kept: _KeptSlot) -> None:
        with self._lock:
            slots = self._kept.get(principal_id, {})
            if slots.get(kept.key) is kept:
                del slots[kept.key]
            if not slots:
                self._kept.pop(principal_id, None)

    def _write_hold(self, key: str, holder: str, until: int, now: int, own_holder: str | None) -> bool:
        """Take the slot item for `holder` until `until`: free, its hold expired, or kept by this instance
        (`own_holder`). False when another holds it; RateLimitUnavailable when DynamoDB cannot be asked."""
        condition = "attribute_not_exists(expiresAt) OR expiresAt <= :now"
        values = {
            ":holder": {"S": holder},
            ":expires": {"N": str(until)},
            ":now": {"N": str(now)},
        }
        if own_holder is not None:
            condition += " OR holder = :own"
            values[":own"] = {"S": own_holder}
        try:
            self._client.update_item(
                TableName=self.table_name,
                Key={"id": {"S": key}},
                UpdateExpression="SET holder = :holder, expiresAt = :expires",
                ConditionExpression=condition,
                ExpressionAttributeValues=values,
            )
        except botocore_errors.ClientError as error:
            if error.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException":
                return False
            raise RateLimitUnavailable(error.response.get("Error", {}).get("Code", "ClientError")) from None
        except botocore_errors.BotoCoreError as error:
            raise RateLimitUnavailable(type(error).__name__) from None
        return True
