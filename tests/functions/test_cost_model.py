"""The cost model's counts on the local stack: a change that adds (or drops) an AWS request or a Lambda invocation
per unit of work fails here, naming the unit and the request, until `make cost` rewrites the expected counts and
docs/cost.md (and the request has a price)."""

from __future__ import annotations

import contextlib

from tests.cost.counting import DAILY_JOB_LEASE
from tests.cost.model import count_changes, counts, load_expected, load_prices, unit_line_items
from tests.cost.units import LogVolume, cost_stack, measure


def test_every_unit_of_work_makes_the_requests_the_cost_table_expects_and_each_has_a_price():
    # Given the expected counts committed with docs/cost.md, and the price table
    expected = load_expected()
    prices = load_prices()

    # When every unit of work runs once on the local stack (default parameters)
    measurement = measure(repetitions=1)

    # Then each unit made exactly the requests and invocations the table holds
    changes = count_changes(expected, counts(measurement))
    assert not changes, "AWS requests per unit of work moved; run `make cost` and commit:\n" + "\n".join(changes)
    # And every one of them is priced (a new operation needs its row in REQUEST_PRICES)
    for unit in measurement.units.values():
        assert unit_line_items(unit, measurement, prices)


def test_a_job_writes_at_most_three_dynamodb_items_from_submit_to_succeeded():
    # Given the local stack (the dev key is a pro caller: its day is leased 50 jobs at a time), one job run first
    # (cold caches, the day's first lease)
    with contextlib.redirect_stdout(LogVolume()), cost_stack(LogVolume(), {}) as stack:
        job_table = stack.stack.environment.table_name("JobTable")
        stack.job()
        stack.counter.reset()

        # When ten jobs are submitted through the endpoint and run by the worker to SUCCEEDED, one at a time
        for _ in range(10):
            stack.job()
        log = stack.counter.reset()

    # Then each job wrote three JobTable items (the job at submit, its claim, its end: the quotas hold no item of
    # their own), and the day's count was written at most once for the ten (a lease per block of 50)
    leases = log.requests[DAILY_JOB_LEASE]
    assert (log.dynamodb_items_by_table[job_table] - leases) / 10 == 3
    assert leases <= 1
    assert log.dynamodb_items_by_table[job_table] / 10 <= 3.1
    assert log.requests["dynamodb:TransactWriteItems"] == 0
