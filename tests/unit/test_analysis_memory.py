"""An analysis' memory is bounded before it is spent: a hostile dataset costs no more memory than a benign one
of the same size (peak allocations traced in one run, a ratio), and what the budget cannot hold is refused as
soon as it is seen, as a permanent error naming the limit."""

from __future__ import annotations

import json
import tracemalloc

import pytest

from mcp_backend.tools.analyze_dataset import MAX_COLUMNS
from mcp_backend.tools.dataset_stream import FetchPolicy
from mcp_backend.tools.errors import DatasetOverBudget
from tests.unit.test_analyze_dataset import analyze, files  # noqa: F401 - the fixture serving the datasets

BUDGET = 8 * 1024 * 1024
POLICY = FetchPolicy(memory_budget_bytes=BUDGET)
SIZE = 1024 * 1024
# A benign dataset's peak is mostly the fetch's own buffers; the hostile one may cost a few times that at most.
MAX_PEAK_RATIO = 3.0


def peak_bytes(files, path: str) -> int:  # noqa: F811 - the fixture's value, passed in
    tracemalloc.start()
    try:
        analyze(files, path, POLICY)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def csv_of(size: int, value) -> bytes:
    header = b"a,b,c,d\n"
    rows, n = [header], 0
    while sum(map(len, rows)) < size:
        rows.append(",".join(value(n, column) for column in range(4)).encode() + b"\n")
        n += 1
    return b"".join(rows)


def test_distinct_long_values_cost_no_more_than_repeated_ones(files):  # noqa: F811
    # Given a CSV whose every value is a distinct 2,000-character string, and one of the same size with few values
    files["/hostile.csv"] = csv_of(SIZE, lambda n, c: f"{n:08d}{c}".ljust(2000, "x"))
    files["/benign.csv"] = csv_of(SIZE, lambda n, c: f"{n % 7}".ljust(2000, "x"))

    # When each is analysed
    ratio = peak_bytes(files, "/hostile.csv") / peak_bytes(files, "/benign.csv")

    # Then the hostile one's peak memory is within a small factor of the benign one's
    assert ratio <= MAX_PEAK_RATIO, f"hostile/benign peak memory {ratio:.1f}x"


def test_a_column_per_row_is_refused_at_the_column_cap_before_its_memory_is_spent(files):  # noqa: F811
    # Given JSON Lines whose every row brings a new key (each a column with its own statistics)
    files["/wide.jsonl"] = b"".join(json.dumps({f"k{n}": n}).encode() + b"\n" for n in range(50_000))

    # When it is analysed / Then it is refused at the first column past the cap, naming it
    with pytest.raises(DatasetOverBudget, match=f"more than {MAX_COLUMNS} columns"):
        analyze(files, "/wide.jsonl", POLICY)


def test_a_json_array_larger_than_its_parsed_form_may_take_is_refused_before_it_is_parsed(files):  # noqa: F811
    # Given a JSON array whose parsed form would pass the budget
    files["/big.json"] = json.dumps([{"n": n, "s": "v" * 40} for n in range(20_000)]).encode()

    # When it is analysed / Then it is refused naming the budget and what to do instead
    with pytest.raises(DatasetOverBudget, match=r"JSON array dataset .* characters .*8 MiB.*JSON Lines"):
        analyze(files, "/big.json", POLICY)


def test_a_line_longer_than_the_budget_allows_is_refused_as_soon_as_it_is(files):  # noqa: F811
    # Given a CSV with one 1 MiB line (a budget of 8 MiB parses lines of at most 512 Ki characters)
    files["/long.csv"] = b"a\n" + b"x" * (1024 * 1024) + b"\n"

    # When it is analysed / Then that line is refused, naming the limit
    with pytest.raises(DatasetOverBudget, match="A line is longer than the 524288 characters"):
        analyze(files, "/long.csv", POLICY)


def test_a_dataset_within_the_budget_is_analysed_as_before(files):  # noqa: F811
    # Given a benign CSV of 1 MiB / When it is analysed within the budget / Then every row is counted
    files["/benign.csv"] = csv_of(SIZE, lambda n, c: f"{n % 7}".ljust(100, "x"))
    result = analyze(files, "/benign.csv", POLICY)
    assert result["rowCount"] > 2_000 and len(result["columns"]) == 4
