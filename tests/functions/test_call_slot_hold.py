"""How long the endpoint's calls-in-flight slots are held (RateLimitTable on moto, the McpServer function's own
settings): a slot is held until its call ends, however long past the synchronous deadline it runs, and a slot whose
holder never gives it back is free once the function's timeout has ended any call it could have held."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import boto3
import time_machine

from mcp_backend.api_keys import Principal
from mcp_backend.aws import AwsClients
from mcp_backend.call_slots import SLOT_HOLD_MARGIN_SECONDS
from mcp_backend.config import McpSettings, load_settings
from mcp_backend.mcp.server import TierCallSlots

BOB = Principal(user_id="user-bob", tier="free")


def run_now(extend: Callable[[], None]) -> None:
    extend()


def instance(settings: McpSettings) -> TierCallSlots:
    """One endpoint instance's slots (DynamoDB is what instances share)."""
    return TierCallSlots(settings, AwsClients(boto3.client), extend_off_path=run_now)


def test_a_call_that_outlives_its_deadline_keeps_its_slot_until_it_ends(local):
    # Given the endpoint's settings (a free tier of 2 calls in flight), and bob at his cap on one instance
    settings = load_settings(McpSettings, local.stack.function("McpServer").environment)
    first, second = instance(settings), instance(settings)
    assert first.limit(BOB) == 2
    with time_machine.travel(datetime.now(UTC), tick=False) as clock:
        held = [first.take(BOB), first.take(BOB)]

        # When both calls still run past their deadline and the margin, and bob starts a third on either instance
        clock.shift(timedelta(seconds=settings.sync_call_deadline + SLOT_HOLD_MARGIN_SECONDS + 1))
        while_running = [second.take(BOB), first.take(BOB)]

        # And then one of the calls ends
        first.give_back(held[0])
        after_one_ended = first.take(BOB)

    # Then the third call is refused while both run, and admitted once one has ended
    assert None not in held
    assert while_running == [None, None]
    assert after_one_ended is not None


def test_a_slot_whose_holder_died_is_free_once_the_function_timeout_has_passed(local):
    # Given bob's two slots taken by an instance that then died (it never gives them back)
    settings = load_settings(McpSettings, local.stack.function("McpServer").environment)
    died, other = instance(settings), instance(settings)
    with time_machine.travel(datetime.now(UTC), tick=False) as clock:
        assert None not in [died.take(BOB), died.take(BOB)]

        # When another instance asks just before the function's timeout (and the margin) has passed, and after
        clock.shift(timedelta(seconds=settings.function_timeout_seconds + SLOT_HOLD_MARGIN_SECONDS - 1))
        before = other.take(BOB)
        clock.shift(timedelta(seconds=2))
        after = other.take(BOB)

    # Then the slots are held until no call of the dead instance can still run, and free from then on
    assert before is None
    assert after is not None
