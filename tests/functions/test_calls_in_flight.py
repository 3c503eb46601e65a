"""Calls in flight per principal, held across instances in the template's RateLimitTable (on moto): a principal
takes at most its cap of slots, a slot given back is reused by its instance's next call without a request on the
request path and is free for other instances once it has lingered, a slot whose holder died frees itself when its
hold expires, and a late give-back never frees a slot another call holds."""

from __future__ import annotations

import boto3
import pytest
from botocore.exceptions import ClientError

from mcp_backend.call_slots import (
    SLOT_HOLD_MARGIN_SECONDS,
    SLOT_LINGER_SECONDS,
    SLOT_REUSE_MARGIN_SECONDS,
    InFlightSlots,
    SlotLease,
)
from mcp_backend.request_rate import RateLimitUnavailable
from tests.instants import minute_start

HOLD = 60


class Clock:
    def __init__(self) -> None:
        self.now = minute_start()

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def instance(local, clock: Clock) -> InFlightSlots:
    """One endpoint instance's view of the slots (each instance has its own; DynamoDB is what they share)."""
    return InFlightSlots(local.table_name("RateLimitTable"), boto3.client("dynamodb"), clock, first_slot=lambda cap: 0)


def test_a_principal_holds_at_most_its_cap_across_instances(local, clock):
    # Given two instances and a cap of 2
    first, second = instance(local, clock), instance(local, clock)

    # When three calls of one principal ask, on either instance
    taken = [first.take("apikey:bob", 2, HOLD), second.take("apikey:bob", 2, HOLD), first.take("apikey:bob", 2, HOLD)]

    # Then two hold slots and the third is refused, while another principal is not affected
    assert taken[0] is not None and taken[1] is not None and taken[2] is None
    assert second.take("apikey:alice", 2, HOLD) is not None


def test_a_slot_given_back_is_free_at_once_on_its_instance(local, clock):
    # Given a principal at its cap of 1
    slots = instance(local, clock)
    held = slots.take("apikey:bob", 1, HOLD)
    assert held is not None and slots.take("apikey:bob", 1, HOLD) is None

    # When the call ends and gives its slot back
    slots.give_back(held)

    # Then the next call takes it
    assert slots.take("apikey:bob", 1, HOLD) is not None


class Recorded:
    """A DynamoDB client that records each request it passes on."""

    def __init__(self) -> None:
        self.client = boto3.client("dynamodb")
        self.requests: list[str] = []

    def update_item(self, **request):
        self.requests.append(request["UpdateExpression"])
        return self.client.update_item(**request)


class OffThePath:
    """The extension executor, run when the test says (the endpoint runs it on a thread after the call starts)."""

    def __init__(self) -> None:
        self.pending: list = []

    def __call__(self, extend) -> None:
        self.pending.append(extend)

    def run(self) -> None:
        while self.pending:
            self.pending.pop(0)()


def test_a_principals_next_call_on_the_same_instance_makes_no_request_before_it_runs(local, clock):
    # Given an instance whose first call of bob took a slot (one write) and ended
    dynamodb, later = Recorded(), OffThePath()
    slots = InFlightSlots(local.table_name("RateLimitTable"), dynamodb, clock, lambda cap: 0, extend_off_path=later)
    first = slots.take("apikey:bob", 2, HOLD)
    assert first is not None and len(dynamodb.requests) == 1
    slots.give_back(first)

    # When ten more calls run one after another, a second apart
    on_the_path = []
    for _ in range(10):
        clock.now += 1
        before = len(dynamodb.requests)
        lease = slots.take("apikey:bob", 2, HOLD)
        on_the_path.append(len(dynamodb.requests) - before)
        later.run()  # the hold's extension, while the call runs
        assert lease is not None
        slots.give_back(lease)

    # Then none made a DynamoDB request before it ran: each extended its slot's hold off the path and shortened it
    # after its answer (two writes, neither in front of the call)
    assert on_the_path == [0] * 10
    assert len(dynamodb.requests) == 2 + 2 * 10


def test_a_slot_kept_by_an_idle_instance_is_free_for_another_once_it_has_lingered(local, clock):
    # Given a principal with a cap of 1 whose call ended on one instance
    first, second = instance(local, clock), instance(local, clock)
    held = first.take("apikey:bob", 1, HOLD)
    assert held is not None
    first.give_back(held)

    # When its next calls reach another instance, before and after the slot's linger
    clock.now += SLOT_LINGER_SECONDS - 1
    before = second.take("apikey:bob", 1, HOLD)
    clock.now += 1
    after = second.take("apikey:bob", 1, HOLD)

    # Then the other instance waits at most the linger (the bounded error), and then holds the slot, which the
    # first instance no longer starts calls on
    assert before is None and after is not None
    assert first.take("apikey:bob", 1, HOLD) is None


def test_a_kept_slot_stops_admitting_calls_soon_after_the_table_becomes_unreachable(local, clock):
    # Given an instance keeping bob's slot after a call, and then DynamoDB failing
    dynamodb = Recorded()
    slots = InFlightSlots(local.table_name("RateLimitTable"), dynamodb, clock, lambda cap: 0)
    held = slots.take("apikey:bob", 1, HOLD)
    assert held is not None
    slots.give_back(held)
    dynamodb.client = DownDynamoDB()

    # When the next call comes at once, and another after the kept hold's reuse window
    soon = slots.take("apikey:bob", 1, HOLD)
    clock.now += SLOT_LINGER_SECONDS - SLOT_REUSE_MARGIN_SECONDS + 1

    # Then the first starts on the kept slot, its extension fails and drops it, and the next is refused as
    # unavailable (fail closed): the table's loss admits calls for at most the linger
    assert soon is not None
    with pytest.raises(RateLimitUnavailable):
        slots.take("apikey:bob", 1, HOLD)


def test_a_slot_whose_holder_died_frees_itself_when_its_hold_expires(local, clock):
    # Given a slot taken by an instance that then died (it never gives it back)
    slots = instance(local, clock)
    assert slots.take("apikey:bob", 1, HOLD) is not None

    # When the hold has not yet expired, and then when it has
    clock.now += HOLD + SLOT_HOLD_MARGIN_SECONDS - 1
    before = slots.take("apikey:bob", 1, HOLD)
    clock.now += 1
    after = slots.take("apikey:bob", 1, HOLD)

    # Then it is held until then, and free from then on
    assert before is None and after is not None


def test_a_late_give_back_does_not_free_a_slot_another_call_holds(local, clock):
    # Given a slot whose hold expired and that another call then took
    slots = instance(local, clock)
    stale = slots.take("apikey:bob", 1, HOLD)
    assert stale is not None
    clock.now += HOLD + SLOT_HOLD_MARGIN_SECONDS
    assert slots.take("apikey:bob", 1, HOLD) is not None

    # When the first call gives its slot back late
    slots.give_back(stale)

    # Then the slot stays with the call that holds it now
    assert slots.take("apikey:bob", 1, HOLD) is None


class DownDynamoDB:
    def update_item(self, **request):
        raise ClientError({"Error": {"Code": "InternalServerError", "Message": "down"}}, "UpdateItem")


def test_slots_that_cannot_be_read_refuse_the_call_rather_than_admit_it(clock):
    # Given DynamoDB failing
    slots = InFlightSlots("RateLimitTable", DownDynamoDB(), clock)

    # When a call asks for a slot / Then it is refused as unavailable (fail closed), and a give-back never raises
    with pytest.raises(RateLimitUnavailable):
        slots.take("apikey:bob", 2, HOLD)
    slots.give_back(SlotLease("inflight#apikey:bob#0", "x"))
