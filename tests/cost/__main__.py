"""`make cost`: count every unit of work on the local stack, then rewrite docs/cost.md and the expected counts,
printing what moved since they were last written."""

from __future__ import annotations

import sys

from devstack.template import ROOT
from tests.cost.model import EXPECTED_FILE, count_changes, counts, load_expected, load_prices, write_expected
from tests.cost.report import render
from tests.cost.units import measure

REPETITIONS = 5
DOC = ROOT / "docs" / "cost.md"


def main() -> int:
    prices = load_prices()
    measurement = measure(REPETITIONS)
    document = render(measurement, prices)  # raises on a request with no price: nothing is written then
    previous = load_expected() if EXPECTED_FILE.exists() else {}
    changes = count_changes(previous, counts(measurement))
    write_expected(measurement)
    DOC.write_text(document)
    print(f"wrote {DOC.relative_to(ROOT)} and {EXPECTED_FILE.relative_to(ROOT)}", file=sys.stderr)
    for change in changes:
        print(f"  {change}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
