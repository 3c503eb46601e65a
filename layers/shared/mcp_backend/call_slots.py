"""The calls of one principal that may run at once across every instance of the endpoint (InFlightSlots):
RateLimitTable's slot items (its request counters are request_rate.py's)."""

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
from mcp_backend.observability import logger
from mcp_backend.request_rate import LeaseAhead, RateLimitUnavailable

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
