"""The cost model's counts on the local stack: a change that adds (or drops) an AWS request or a Lambda invocation
per unit of work fails here, naming the unit and the request, until `make cost` rewrites the expected counts and
docs/cost.md (and the request has a price)."""

from __future__ import annotations

from tests.cost.model import count_changes, counts, load_expected, load_prices, unit_line_items
from tests.cost.units import measure


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
