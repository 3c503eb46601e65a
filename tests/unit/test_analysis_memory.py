"""An analysis' memory is bounded before it is spent: a hostile dataset costs no more memory than a benign one
of the same size (peak allocations traced in one run, a ratio), and what the budget cannot hold is refused as
soon as it is seen, as a permanent error naming the limit."""

from __future__ import annotations

import contextlib
import json
import tracemalloc
from collections.abc import Iterator

import httpx
import pytest

from mcp_backend.tools.analyze_dataset import MAX_COLUMNS, AnalysisBudget, AnalyzeInput, analyze_dataset
from mcp_backend.tools.dataset_stream import FetchPolicy
from mcp_backend.tools.errors import DatasetOverBudget, DatasetUnparseable
from tests.unit.test_analyze_dataset import HOST, analyze, files  # noqa: F401 - the fixture serving the datasets

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


def test_a_json_array_larger_than_the_budget_is_analysed_item_by_item(files):  # noqa: F811
    # Given a JSON array of 2 MiB, four times what one item may be
    files["/big.json"] = json.dumps([{"n": n, "s": "v" * 40} for n in range(40_000)]).encode()

    # When it is analysed within 8 MiB / Then every item is counted
    assert analyze(files, "/big.json", POLICY)["rowCount"] == 40_000


def test_a_json_array_item_longer_than_the_budget_allows_is_refused_as_soon_as_it_is(files):  # noqa: F811
    # Given a JSON array whose second item is longer than the budget allows, then more items
    item = json.dumps({"s": "v" * AnalysisBudget(BUDGET).max_text_chars})
    files["/long.json"] = f'[{{"s": 1}}, {item}, {{"s": 2}}]'.encode()

    # When it is analysed / Then it is refused naming the budget and what to do instead
    with pytest.raises(DatasetOverBudget, match=r"item of a JSON array dataset .* characters .*8 MiB.*JSON Lines"):
        analyze(files, "/long.json", POLICY)


def in_chunks(body: bytes) -> Iterator[bytes]:
    """A body as the network delivers it: 64 KiB at a time (the whole body at once would be one piece of text)."""
    return (body[start : start + 64 * 1024] for start in range(0, len(body), 64 * 1024))


def array_of(item: str, chars: int) -> str:
    return "[" + ",".join([item] * (chars // (len(item) + 1))) + "]"


def one_item(parts: str, chars: int) -> str:
    """A JSON array of one object holding `parts` repeated, the item as long as `chars` allows."""
    return '[{"a":[' + ",".join([parts] * ((chars - 12) // (len(parts) + 1))) + "]}]"


def distinct_rows(value, then: str = "") -> str:
    """A JSON array of 1,500 rows of 50 columns, every value distinct (the distinct values' half of the budget
    spent), then `then` (another item, or nothing)."""
    rows = (json.dumps({f"c{c}": value(row * 100 + c) for c in range(50)}, ensure_ascii=False) for row in range(1500))
    return "[" + ",".join(rows) + (f",{then}" if then else "") + "]"


# Whole arrays are sized within what one array could be parsed whole in before it was streamed (1/16 of the
# budget), items at the most an item may be.
ARRAY_CHARS = 500_000
ITEM_CHARS = AnalysisBudget(BUDGET).max_text_chars - 64
HOSTILE_ARRAYS = {
    "many-empty-objects": lambda: array_of("{}", ARRAY_CHARS),
    "many-one-key-objects": lambda: array_of('{"a":0}', ARRAY_CHARS),
    "many-floats": lambda: array_of('{"a":1e300}', ARRAY_CHARS),
    "big-integers": lambda: array_of('{"a":' + "9" * 4000 + "}", ARRAY_CHARS),
    "deep-nesting": lambda: '[{"a":' + "[" * 100_000 + "]" * 100_000 + "}]",
    "nested-lists-in-one-item": lambda: one_item("[" * 40 + "]" * 40, ITEM_CHARS),
    "tiny-lists-in-one-item": lambda: one_item("[[]]", ITEM_CHARS),
    "long-string": lambda: '[{"a":"' + "x" * (ITEM_CHARS - 10) + '"}]',
    "long-four-byte-string": lambda: '[{"a":"' + "\U0001f600" * (ITEM_CHARS - 10) + '"}]',
    "distinct-short-strings": lambda: distinct_rows(lambda n: f"{n:031d}"),
    "distinct-four-byte-strings": lambda: distinct_rows(lambda n: "\U0001f600" * 23 + f"{n:08d}"),
    "distinct-values-then-a-long-item": lambda: distinct_rows(
        lambda n: f"{n:031d}", one_item("[" * 40 + "]" * 40, ITEM_CHARS)[1:-1]
    ),
}


@pytest.mark.parametrize("shape", list(HOSTILE_ARRAYS))
def test_a_hostile_json_array_stays_within_its_memory_budget(files, shape):  # noqa: F811 - resolves the host
    # Given a JSON array of a hostile shape, served in network-sized chunks

    body = HOSTILE_ARRAYS[shape]().encode()
    request = AnalyzeInput(dataset_url=f"https://{HOST}/hostile.json")
    served = httpx.MockTransport(lambda _: httpx.Response(200, content=in_chunks(body)))

    # When it is analysed (or refused) under an 8 MiB budget
    tracemalloc.start()
    try:
        with contextlib.suppress(DatasetUnparseable, DatasetOverBudget):
            analyze_dataset(request, policy=POLICY, transport=served)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()

    # Then its peak memory stays within 1.1x the budget
    assert peak / BUDGET <= 1.1, f"{shape}: peak {peak / BUDGET:.2f}x the budget"


def test_a_line_longer_than_the_budget_allows_is_refused_as_soon_as_it_is(files):  # noqa: F811
    # Given a CSV with one 1 MiB line (a budget of 8 MiB parses lines of at most 74,898 characters)
    files["/long.csv"] = b"a\n" + b"x" * (1024 * 1024) + b"\n"

    # When it is analysed / Then that line is refused, naming the limit
    with pytest.raises(DatasetOverBudget, match="A line is longer than the 74898 characters"):
        analyze(files, "/long.csv", POLICY)


def test_a_dataset_within_the_budget_is_analysed_as_before(files):  # noqa: F811
    # Given a benign CSV of 1 MiB / When it is analysed within the budget / Then every row is counted
    files["/benign.csv"] = csv_of(SIZE, lambda n, c: f"{n % 7}".ljust(100, "x"))
    result = analyze(files, "/benign.csv", POLICY)
    assert result["rowCount"] > 2_000 and len(result["columns"]) == 4
