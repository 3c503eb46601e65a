"""An SQS mapping's pollers: one long-polls an idle queue, every one polls once messages come, and an
empty long poll returns the queue to one (devstack.sources.pollers)."""

from __future__ import annotations

import threading
import time

from devstack.sources.pollers import PollerGate


def test_an_idle_queue_is_long_polled_by_one_poller_only():
    # Given the gate of a mapping with four pollers
    gate = PollerGate(4)

    # When one poller takes its turn: then no other may poll meanwhile
    assert gate.enter()
    assert not gate.enter(block=False)


def test_once_messages_arrive_every_poller_polls_and_an_empty_poll_returns_to_one():
    # Given a mapping with four pollers, one of them long-polling
    gate = PollerGate(4)
    assert gate.enter()

    # When its poll receives the first messages: then the three others may poll too, and no fifth
    gate.active()
    assert [gate.enter(block=False) for _ in range(4)] == [True, True, True, False]

    # When one poll ends empty (the queue is idle again) and the others end too
    gate.leave(received=False)
    for _ in range(3):
        gate.leave(received=True)

    # Then one poller polls again, and only one
    assert gate.enter(block=False)
    assert not gate.enter(block=False)


def test_a_poller_waiting_for_its_turn_gets_it_when_the_queue_becomes_active_and_ends_at_close():
    # Given one poller long-polling and two waiting for their turn
    gate = PollerGate(2)
    assert gate.enter()
    turns: list[bool] = []
    waiting = [threading.Thread(target=lambda: turns.append(gate.enter())) for _ in range(2)]
    for thread in waiting:
        thread.start()

    # When the poll receives messages: then one waiting poller gets a turn (two of two poll)
    gate.active()
    deadline = time.monotonic() + 30
    while not turns and time.monotonic() < deadline:
        time.sleep(0.01)
    assert turns == [True]
    # When the stack stops: then the other waiting poller ends without a turn
    gate.close()
    for thread in waiting:
        thread.join(timeout=10)
    assert sorted(turns) == [False, True]
