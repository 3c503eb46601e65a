"""The gate between the local stack's SQS pollers and its stop (devstack.sources.batches_in_delivery)."""

from __future__ import annotations

import threading

from devstack.sources.batches_in_delivery import Deliveries


def test_a_batch_received_after_the_stop_began_is_refused():
    # Given a stop that found nothing under way
    deliveries = Deliveries()
    assert deliveries.close(timeout=1)

    # When a poller's long poll returns a batch afterwards
    admitted = deliveries.admit()

    # Then it may not deliver it (the function is not invoked after the stop began)
    assert admitted is False


def test_the_stop_waits_for_the_batch_under_way_and_only_for_it():
    # Given a batch being delivered
    deliveries = Deliveries()
    assert deliveries.admit()
    finished = threading.Event()

    def finish() -> None:
        finished.set()
        deliveries.done()

    # When the stop closes the gate while the delivery finishes
    threading.Timer(0.2, finish).start()
    all_done = deliveries.close(timeout=30)

    # Then the stop returned after the batch was done, and reports that nothing was cut short
    assert finished.is_set()
    assert all_done is True


def test_a_stop_reports_a_batch_still_running_at_its_timeout():
    # Given a batch that never finishes
    deliveries = Deliveries()
    assert deliveries.admit()

    # When the stop's wait times out
    all_done = deliveries.close(timeout=0.1)

    # Then it says so instead of hanging
    assert all_done is False
