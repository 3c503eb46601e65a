"""`make cost`: count every unit of work on the local stack, then rewrite docs/cost.md and the expected counts,
printing what moved since they were last written. `--log-volume-at LEVEL` prints each unit's log bytes at that
LogLevel as JSON: the functions' loggers take their level at import, so another level runs in its own process."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from typing import Any

from devstack.stack.template import ROOT
from tests.cost.model import EXPECTED_FILE, count_changes, counts, load_expected, load_prices, write_expected
from tests.cost.report import render
from tests.cost.units import measure, span_volume

REPETITIONS = 5
DOC = ROOT / "docs" / "cost.md"
OTHER_LOG_LEVELS = ("DEBUG", "WARNING")  # LogLevel values besides the default whose log volume is measured


def _in_own_process(*arguments: str) -> Any:
    """What `python -m tests.cost <arguments>` prints as JSON on its last line."""
    answer = subprocess.run(
        [sys.executable, "-m", "tests.cost", *arguments],
        cwd=ROOT,
        env=os.environ,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(answer.stdout.strip().splitlines()[-1])


def log_volume_at(level: str) -> dict[str, float]:
    """Each unit's log bytes with LogLevel=level, measured in a process of its own."""
    return dict(_in_own_process("--log-volume-at", level))


def spans_per_unit() -> dict[str, dict[str, float]]:
    """Each unit's spans with tracing on, measured in a process of its own (tracing is configured per process)."""
    return dict(_in_own_process("--spans"))


def main() -> int:
    arguments = argparse.ArgumentParser(prog="python -m tests.cost")
    arguments.add_argument("--log-volume-at", metavar="LEVEL")
    arguments.add_argument("--spans", action="store_true", help="print each unit's spans with tracing on, as JSON")
    parsed = arguments.parse_args()
    if parsed.spans:
        print(json.dumps(span_volume(REPETITIONS)))
        return 0
    level = parsed.log_volume_at
    if level:
        at_level = measure(REPETITIONS, {"LogLevel": level})
        print(json.dumps({name: unit.log_bytes for name, unit in at_level.units.items()}))
        return 0
    prices = load_prices()
    measurement = measure(REPETITIONS)
    other_levels = {level: log_volume_at(level) for level in OTHER_LOG_LEVELS}
    spans = spans_per_unit()
    # raises on a request with no price: nothing is written then
    document = render(measurement, prices, other_levels, spans)
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
