"""The work a stop of the local stack waits for (devstack.work_in_flight): what is under way, each unit for as long as
its own function may run."""

from __future__ import annotations

import threading

from devstack.work_in_flight import WorkInFlight


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_batch_received_after_the_stop_began_is_refused():
    # Given a stop that found nothing under way
    work = WorkInFlight()
    work.close()
    assert work.wait(grace=1)

    # When a poller's long poll returns a batch afterwards
    admitted = work.admit(timeout_seconds=30)

    # Then it may not deliver it (the function is not invoked after the stop began)
    assert admitted is None


def test_the_stop_waits_for_the_batch_under_way_and_only_for_it():
    # Given a batch being delivered
    work = WorkInFlight()
    token = work.admit(timeout_seconds=30)
    assert token is not None
    finished = threading.Event()

    def finish() -> None:
        finished.set()
        work.done(token)

    # When the stop closes the gate while the delivery finishes
    work.close()
    threading.Timer(0.2, finish).start()
    all_done = work.wait(grace=5)

    # Then the stop returned after the batch was done, and reports that nothing was cut short
    assert finished.is_set()
    assert all_done is True


def test_the_stop_gives_up_on_work_past_its_own_functions_timeout_not_a_longer_one():
    # Given an invocation of a function with a 5 s timeout that never returns, tracked from t = 100
    clock = Clock()
    work = WorkInFlight(clock)
    entered, release = threading.Event(), threading.Event()

    def hung_invocation() -> None:
        with work.tracked(timeout_seconds=5):
            entered.set()
            release.wait(30)

    runner = threading.Thread(target=hung_invocation, daemon=True)
    runner.start()
    assert entered.wait(10)

    # When the clock is past its deadline and the grace, and the stop waits
    clock.now = 100 + 5 + 1 + 0.001
    all_done = work.wait(grace=1)

    # Then the wait gives up at once and says something was still running
    assert all_done is False
    release.set()
    runner.join(10)
    assert work.wait(grace=1) is True


def test_work_tracked_after_the_stop_began_is_still_waited_for():
    # Given a stop that has begun
    work = WorkInFlight()
    work.close()
    entered, release = threading.Event(), threading.Event()

    # When an invocation already asked for runs (tracked work is never refused)
    def invocation() -> None:
        with work.tracked(timeout_seconds=30):
            entered.set()
            release.wait(10)

    runner = threading.Thread(target=invocation, daemon=True)
    runner.start()
    assert entered.wait(10)
    threading.Timer(0.2, release.set).start()

    # Then the stop's wait returns once it has finished, with nothing cut short
    assert work.wait(grace=5) is True
    runner.join(10)
    assert not runner.is_alive()
