"""analyze_dataset: row count, columns and per-column statistics of a CSV, JSON Lines or JSON-array dataset.

CSV, JSON Lines and JSON arrays are parsed as the bytes stream in (an array item by item). Results and errors
describe the data's shape, never its values beyond the per-column min/max/mean of numeric columns.

Memory is bounded before it is spent, by the fetch policy's memory budget (a share of the function's memory,
AnalysisBudget): a row (a CSV or JSON Lines line, a JSON array's item) is refused as soon as its text passes
what its parsed form may take, a dataset with more columns than a result may hold is refused at the first
column past the cap, and the distinct values every column counts share one budget (a long value is kept as its
hash): a hostile dataset costs no more memory than a benign one of the same size.
"""

from __future__ import annotations

import codecs
import csv
import io
import itertools
import json
import math
import re
from collections.abc import Hashable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

from mcp_backend.netsafety import redact_url
from mcp_backend.tools.context import ProgressCallback, ToolContext, ToolOutput
from mcp_backend.tools.dataset_access import check_s3_dataset_access
from mcp_backend.tools.dataset_stream import DatasetStream, FetchPolicy
from mcp_backend.tools.errors import DatasetOverBudget, DatasetUnparseable
from mcp_backend.tools.fetch import S3Client, open_dataset, s3_object_size, split_s3_url

if TYPE_CHECKING:
    import httpx

# Exact distinct counting stops here per column; read at call time so tests can lower it.
DISTINCT_COUNT_BOUND = 10_000
PROGRESS_EVERY_ROWS = 1_000
# More columns than this is no table a summary helps with, and a result of them would pass its size cap.
MAX_COLUMNS = 1_000
# What the budget pays for: a parsed row or JSON array item takes at most about this many bytes per character of
# its text, the text and its copies included (measured with tracemalloc, CPython 3.11: nested one-element lists
# `[[...]]` 44 parsed, one-key objects 28, CSV fields of two 4-byte characters 31, plain floats 8).
PARSED_TEXT_FACTOR = 56
# A distinct value's entry: its tagged key (a 2-tuple, 56 bytes), a short ASCII string or a hash (up to 81), and
# its share of the set's table (16-byte slots, a quarter to three fifths used): measured at most about 230.
DISTINCT_ENTRY_BYTES = 256
# Values longer than this are counted by their hash: a set of long values would hold every value.
SHORT_VALUE_CHARS = 32

DatasetFormat = Literal["csv", "jsonl", "json"]

_URL_SCHEMES = frozenset({"https", "http", "s3"})
_SUFFIX_FORMATS: dict[str, DatasetFormat] = {".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl"}
# Plain decimal notation only: float() would also take "nan", "inf", "1_000" and surrounding spaces.
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_CSV_SUMMARY_HEADER = ("name", "type", "nullCount", "distinctCount", "min", "max", "mean")


class AnalyzeOptions(BaseModel):
    # hide_input_in_errors: a rejected URL may carry credentials; errors must not echo it.
    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True, defer_build=True)

    max_rows: int | None = Field(None, ge=1, le=1_000_000)
    output_format: Literal["json", "csv"] = "json"


class AnalyzeInput(BaseModel):
    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True, defer_build=True)

    dataset_url: str = Field(max_length=2048)
    options: AnalyzeOptions = Field(default_factory=AnalyzeOptions)

    @field_validator("dataset_url")
    @classmethod
    def _check_dataset_url(cls, value: str) -> str:
        # Whether http:// (or a host) is allowed is the fetch policy's call; this checks shape only.
        if any(ch.isspace() or ord(ch) < 0x20 or ord(ch) == 0x7F for ch in value):
            raise ValueError("must not contain whitespace or control characters")
        try:
            parts = urlsplit(value)
            _ = parts.port  # raises on a malformed port
        except ValueError:
            raise ValueError("is not a valid URL") from None
        scheme = parts.scheme.lower()
        if scheme not in _URL_SCHEMES:
            raise ValueError("must be an s3:// or https:// URL")
        if scheme == "s3":
            if split_s3_url(value) is None:
                raise ValueError("must look like s3://bucket/key")
        elif not parts.hostname:
            raise ValueError("must include a host")
        return value


class ColumnSummary(ToolOutput):
    name: str
    type: Literal["empty", "number", "string"]
    nullCount: int
    distinctCount: int
    distinctCountCapped: bool = Field(description="distinctCount stopped at its bound: there are at least as many")
    min: float | None
    max: float | None
    mean: float | None


class AnalyzeOutput(ToolOutput):
    """analyze_dataset's answer (and its job's result)."""

    datasetUrl: str = Field(description="The dataset's URL without credentials or query")
    format: DatasetFormat
    rowCount: int
    truncated: bool = Field(description="Stopped at options.max_rows")
    columns: list[ColumnSummary]
    bytesRead: int
    columnsCsv: str | None = Field(None, description="The columns as CSV, with options.output_format csv")


# A job that reads more rows than this is costly enough (time, the caller's daily jobs) to be confirmed first.
CONFIRM_ABOVE_ROWS = 100_000


def confirmation_question(request: AnalyzeInput) -> str | None:
    """The question a large analysis asks its user before it is queued; None for an ordinary one."""
    max_rows = request.options.max_rows
    if max_rows is None or max_rows <= CONFIRM_ABOVE_ROWS:
        return None
    return f"Analyse up to {max_rows:,} rows? A run this large takes long and counts against your daily jobs."


def admit(request: AnalyzeInput, ctx: ToolContext) -> None:
    """Before a job is queued: an s3:// dataset outside the caller's prefix is refused, no job written."""
    check_s3_dataset_access(request.dataset_url, ctx.user_id, ctx.fetch_policy)


def dataset_bytes(request: AnalyzeInput, ctx: ToolContext) -> int | None:
    """The dataset's size, where it is known before reading it (an s3:// object the caller may read): the queued
    worker hands a large one to the durable worker. None for an https:// dataset."""
    check_s3_dataset_access(request.dataset_url, ctx.user_id, ctx.fetch_policy)
    return s3_object_size(request.dataset_url, ctx.fetch_policy)


def run(request: AnalyzeInput, ctx: ToolContext) -> dict[str, Any]:
    """The tool table's entry point: the caller's fetch policy and progress sink; an s3:// dataset outside
    the caller's prefix is refused before any S3 call. Every progress report is also a cancellation
    checkpoint: a cancelled job stops there (ToolContext.checkpoint; in the worker it reads the job's status
    at most once per CANCELLATION_READ_INTERVAL_SECONDS)."""
    check_s3_dataset_access(request.dataset_url, ctx.user_id, ctx.fetch_policy)
    sink = ctx.progress

    def report(fraction: float, message: str) -> None:
        ctx.checkpoint()
        if sink is not None:
            sink(fraction, message)

    return analyze_dataset(request, policy=ctx.fetch_policy, progress=report)


def analyze_dataset(
    request: AnalyzeInput,
    *,
    policy: FetchPolicy,
    s3_client: S3Client | None = None,
    transport: httpx.BaseTransport | None = None,
    progress: ProgressCallback | None = None,
) -> dict[str, Any]:
    """Fetch `request.dataset_url` under `policy` and summarise it.

    Raises a ToolError subclass for anything wrong with the URL or the data; `transport` is for tests.
    """
    report: ProgressCallback = progress or _no_progress
    report(0.0, "Fetching dataset")
    max_rows = request.options.max_rows
    budget = AnalysisBudget(policy.memory_budget_bytes)
    with open_dataset(request.dataset_url, policy, s3_client=s3_client, transport=transport) as stream:
        rows = _RowCounter(stream, report, budget)
        try:
            first_char, text = _peek_first_char(_decode_utf8(stream))
            dataset_format = _detect_format(request.dataset_url, first_char)
            if dataset_format == "csv":
                columns, truncated = _analyze_csv(text, max_rows, rows)
            elif dataset_format == "jsonl":
                columns, truncated = _analyze_json_lines(text, max_rows, rows)
            else:
                columns, truncated = _analyze_json_array(text, max_rows, rows)
        except UnicodeDecodeError:
            raise DatasetUnparseable(f"Dataset is not valid UTF-8 text (after data row {rows.count})") from None
        bytes_read = stream.bytes_read

    result: dict[str, Any] = {
        "datasetUrl": redact_url(request.dataset_url),
        "format": dataset_format,
        "rowCount": rows.count,
        "truncated": truncated,
        "columns": [column.summary(rows.count) for column in columns],
        "bytesRead": bytes_read,
    }
    if request.options.output_format == "csv":
        result["columnsCsv"] = _columns_csv(result["columns"])
    report(1.0, f"Analyzed {rows.count} rows")
    return result


@dataclass
class AnalysisBudget:
    """The limits one analysis works within, from its memory budget: half for the text of the row being parsed
    (a line, or a JSON array's item), half for every column's distinct values."""

    memory_bytes: int
    distinct_left: int = 0

    def __post_init__(self) -> None:
        self.distinct_left = self.memory_bytes // 2 // DISTINCT_ENTRY_BYTES

    @property
    def max_text_chars(self) -> int:
        return max(4096, self.memory_bytes // 2 // PARSED_TEXT_FACTOR)

    def refuse_text(self, what: str) -> DatasetOverBudget:
        return DatasetOverBudget(
            f"{what} is longer than the {self.max_text_chars} characters this function's memory budget "
            f"({self.memory_bytes // (1024 * 1024)} MiB for one analysis) allows; split the data into JSON Lines "
            "or CSV rows, or raise the function's memory"
        )


def _no_progress(_fraction: float, _message: str) -> None:
    return None


class _RowCounter:
    """Counts data rows and reports progress every PROGRESS_EVERY_ROWS of them."""

    def __init__(self, stream: DatasetStream, report: ProgressCallback, budget: AnalysisBudget) -> None:
        self.count = 0
        self._stream = stream
        self._report = report
        self.budget = budget

    def column(self, name: str, known: int) -> _ColumnStats:
        """A new column, the `known + 1`th: refused past MAX_COLUMNS (before its statistics take memory)."""
        if known >= MAX_COLUMNS:
            raise DatasetOverBudget(f"Dataset has more than {MAX_COLUMNS} columns, the most one analysis summarises")
        return _ColumnStats(name, self.budget)

    def row_done(self) -> None:
        self.count += 1
        if self.count % PROGRESS_EVERY_ROWS == 0:
            total = self._stream.content_length
            fraction = min(self._stream.bytes_read / total, 0.99) if total else 0.5
            self._report(fraction, f"Analyzed {self.count} rows")


class _ColumnStats:
    def __init__(self, name: str, budget: AnalysisBudget) -> None:
        self.name = name
        self.non_null = 0
        self._distinct: set[Hashable] = set()
        self._bound = DISTINCT_COUNT_BOUND
        self._budget = budget
        self.distinct_capped = False
        self.numeric = True  # until a non-null value is not a number
        self.minimum = math.inf
        self.maximum = -math.inf
        self.mean = 0.0

    def observe(self, key: Hashable, number: float | None) -> None:
        """Count one non-null value: `key` identifies it for distinct counting, `number` if numeric."""
        self.non_null += 1
        if not self.distinct_capped:
            key = _compact(key)
            if key in self._distinct:
                pass
            elif len(self._distinct) >= self._bound or self._budget.distinct_left <= 0:
                # Past the column's bound, or the analysis' budget for distinct values: the count so far is
                # a lower bound, flagged; the values are freed (their budget goes back to the other columns).
                self._bound = len(self._distinct)
                self._budget.distinct_left += len(self._distinct)
                self.distinct_capped = True
                self._distinct = set()
            else:
                self._distinct.add(key)
                self._budget.distinct_left -= 1
        if self.numeric:
            if number is None:
                self.numeric = False
            else:
                self.minimum = min(self.minimum, number)
                self.maximum = max(self.maximum, number)
                # Running mean: a running sum could overflow where the mean would not.
                self.mean += (number - self.mean) / self.non_null

    def observe_text(self, value: str) -> None:
        if value == "":
            return  # CSV null
        # Parsing is skipped once the column is known not to be numeric: it dominates CSV time.
        self.observe(value, _parse_number(value) if self.numeric else None)

    def observe_json(self, value: Any) -> None:
        if value is None:
            return
        self.observe(_json_key(value), _json_number(value))

    def summary(self, row_count: int) -> dict[str, Any]:
        is_number = self.numeric and self.non_null > 0
        if self.non_null == 0:
            column_type = "empty"
        elif is_number:
            column_type = "number"
        else:
            column_type = "string"
        return {
            "name": self.name,
            "type": column_type,
            "nullCount": row_count - self.non_null,
            "distinctCount": self._bound if self.distinct_capped else len(self._distinct),
            "distinctCountCapped": self.distinct_capped,
            "min": self.minimum if is_number else None,
            "max": self.maximum if is_number else None,
            "mean": self.mean if is_number else None,
        }


def _parse_number(text: str) -> float | None:
    if not _NUMBER.fullmatch(text):
        return None
    number = float(text)
    return number if math.isfinite(number) else None


def _json_number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:  # an int beyond float range
        return None
    return number if math.isfinite(number) else None


def _compact(key: Hashable) -> Hashable:
    """The key as its set holds it: a long or non-ASCII string value by its hash (equal values have equal hashes;
    two such values sharing a 64-bit hash would count once). A short ASCII string takes a byte a character, a
    non-ASCII one up to four: hashed, every entry fits DISTINCT_ENTRY_BYTES."""
    if isinstance(key, str):
        return key if _is_short(key) else ("#", hash(key))
    if isinstance(key, tuple) and isinstance(key[1], str) and not _is_short(key[1]):
        return (key[0], "#", hash(key[1]))
    return key


def _is_short(value: str) -> bool:
    return len(value) <= SHORT_VALUE_CHARS and value.isascii()


def _json_key(value: Any) -> Hashable:
    # Tagged so that true, 1 and "1" stay distinct (True == 1 in Python); 1 and 1.0 are one value.
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int | float):
        return ("number", value)
    if isinstance(value, str):
        return ("string", value)
    return ("json", json.dumps(value, sort_keys=True, separators=(",", ":")))


# --- decoding and format detection -------------------------------------------------------------------


def _decode_utf8(chunks: Iterable[bytes]) -> Iterator[str]:
    """Text pieces of a UTF-8 byte stream (BOM dropped); raises UnicodeDecodeError on bad bytes."""
    decoder = codecs.getincrementaldecoder("utf-8-sig")()
    for chunk in chunks:
        if text := decoder.decode(chunk):
            yield text
    if tail := decoder.decode(b"", final=True):
        yield tail


def _peek_first_char(pieces: Iterator[str]) -> tuple[str, Iterator[str]]:
    """The first non-whitespace character ("" if none) and the unconsumed stream of pieces."""
    buffered: list[str] = []
    for piece in pieces:
        buffered.append(piece)
        if stripped := piece.lstrip():
            return stripped[0], itertools.chain(buffered, pieces)
    return "", iter(buffered)


def _detect_format(url: str, first_char: str) -> DatasetFormat:
    path = urlsplit(redact_url(url)).path.lower()
    for suffix, dataset_format in _SUFFIX_FORMATS.items():
        if path.endswith(suffix):
            return dataset_format
    if first_char == "[":
        return "json"
    if first_char == "{":
        return "jsonl"  # also for .json: one object per line is a common use of that suffix
    return "json" if path.endswith(".json") else "csv"


def _lines(pieces: Iterable[str], budget: AnalysisBudget) -> Iterator[str]:
    """Lines ending in "\\n" (kept) across piece boundaries; splitting only on "\\n" keeps other
    line-break characters inside CSV fields and JSON strings. A line longer than the budget allows is refused
    as soon as it is (its text is never joined)."""
    pending: list[str] = []
    pending_chars = 0
    for piece in pieces:
        start = 0
        while (end := piece.find("\n", start)) != -1:
            if pending_chars + end + 1 - start > budget.max_text_chars:
                raise budget.refuse_text("A line")
            pending.append(piece[start : end + 1])
            yield "".join(pending)
            pending.clear()
            pending_chars = 0
            start = end + 1
        if start < len(piece):
            pending.append(piece[start:])
            pending_chars += len(piece) - start
            if pending_chars > budget.max_text_chars:
                raise budget.refuse_text("A line")
    if pending:
        yield "".join(pending)


# --- formats -----------------------------------------------------------------------------------------


# Complexity exception: one streaming pass over the rows (header, width, row cap and per-cell stats) keeps memory
# flat; splitting it would re-read or buffer the rows.
def _analyze_csv(  # noqa: C901
    pieces: Iterable[str], max_rows: int | None, rows: _RowCounter
) -> tuple[list[_ColumnStats], bool]:
    reader = csv.reader(_lines(pieces, rows.budget))
    try:
        header = next((record for record in reader if record), None)
    except csv.Error:
        raise DatasetUnparseable("CSV dataset is malformed at the header row") from None
    if header is None:
        raise DatasetUnparseable("CSV dataset is empty: it has no header row")
    seen: set[str] = set()
    for position, name in enumerate(header, start=1):
        if name in seen:
            raise DatasetUnparseable(f"CSV header repeats a column name (column {position})")
        seen.add(name)

    columns = [rows.column(name, known) for known, name in enumerate(header)]
    try:
        for record in reader:
            if not record:
                continue  # blank line
            if max_rows is not None and rows.count >= max_rows:
                return columns, True
            if len(record) != len(columns):
                raise DatasetUnparseable(
                    f"CSV data row {rows.count + 1} has {len(record)} fields; the header has {len(columns)}"
                )
            for column, value in zip(columns, record, strict=True):
                column.observe_text(value)
            rows.row_done()
    except csv.Error:
        raise DatasetUnparseable(f"CSV dataset is malformed at data row {rows.count + 1}") from None
    return columns, False


def _analyze_json_lines(
    pieces: Iterable[str], max_rows: int | None, rows: _RowCounter
) -> tuple[list[_ColumnStats], bool]:
    columns: dict[str, _ColumnStats] = {}
    for line_number, line in enumerate(_lines(pieces, rows.budget), start=1):
        if not line.strip():
            continue
        if max_rows is not None and rows.count >= max_rows:
            return list(columns.values()), True
        try:
            record = _loads(line)
        except (ValueError, RecursionError):
            raise DatasetUnparseable(f"JSON Lines dataset has invalid JSON on line {line_number}") from None
        if not isinstance(record, dict):
            raise DatasetUnparseable(f"JSON Lines dataset line {line_number} is not a JSON object")
        _observe_object(columns, record, rows)
        rows.row_done()
    return list(columns.values()), False


def _analyze_json_array(
    pieces: Iterable[str], max_rows: int | None, rows: _RowCounter
) -> tuple[list[_ColumnStats], bool]:
    columns: dict[str, _ColumnStats] = {}
    for record in _ArrayItems(pieces, rows.budget):
        if max_rows is not None and rows.count >= max_rows:
            return list(columns.values()), True
        if not isinstance(record, dict):
            raise DatasetUnparseable(f"JSON dataset row {rows.count + 1} is not an object")
        _observe_object(columns, record, rows)
        rows.row_done()
    return list(columns.values()), False


class _ArrayItems:
    """The items of a JSON array as its text streams in, parsed one at a time: only the unparsed text (at most an
    item's worth past what is buffered) and one parsed item are held, so an array costs what its largest item
    costs, as a line of JSON Lines does. An item longer than the budget allows is refused as soon as it is."""

    def __init__(self, pieces: Iterable[str], budget: AnalysisBudget) -> None:
        self._pieces = iter(pieces)
        self._budget = budget
        self._text = ""
        self._at = 0  # where the unparsed text starts in `_text`
        self._ended = False
        self._lines_before = 0  # line breaks in the text already dropped, and the characters after the last one
        self._column_before = 0

    def __iter__(self) -> Iterator[Any]:
        if self._next_char() != "[":
            raise DatasetUnparseable("JSON dataset must be an array of objects")
        self._at += 1
        if self._next_char() == "]":
            self._at += 1
        else:
            while True:
                yield self._item()
                separator = self._next_char()
                self._at += 1
                if separator == "]":
                    break
                if separator != ",":
                    raise self._invalid(self._at - 1)
        if self._next_char() != "":
            raise self._invalid(self._at)

    def _item(self) -> Any:
        """The next item, its text read until it parses whole (doubling what is read each time, so an item is
        parsed a few times at most)."""
        self._next_char()
        while True:
            try:
                item, end = _DECODER.raw_decode(self._text, self._at)
            except json.JSONDecodeError as error:
                if self._ended or not self._may_continue(error):
                    raise self._invalid(error.pos) from None
            except (ValueError, RecursionError):
                raise DatasetUnparseable("JSON dataset is invalid") from None
            else:
                # A number cut off where the read text ends parses as a shorter one: take an item only once what
                # follows it is read.
                if end + _LONGEST_TOKEN_CHARS <= len(self._text) or self._ended:
                    if end - self._at > self._budget.max_text_chars:
                        raise self._budget.refuse_text("An item of a JSON array dataset")
                    self._at = end
                    return item
            self._read(2 * (len(self._text) - self._at))

    def _may_continue(self, error: json.JSONDecodeError) -> bool:
        """Whether more text could complete the item: it failed in a string, or at the end of what is read."""
        return error.msg.startswith("Unterminated string") or error.pos >= len(self._text) - _LONGEST_TOKEN_CHARS

    def _next_char(self) -> str:
        """The next character that is not JSON whitespace ("" at the end of the text), skipping to it."""
        while True:
            found = _JSON_SPACE.match(self._text, self._at)
            self._at = found.end() if found else self._at
            if self._at < len(self._text) or self._ended:
                return self._text[self._at : self._at + 1]
            self._read(1)

    def _read(self, wanted: int) -> None:
        """Read until at least `wanted` characters are unparsed (or the text ends), dropping the parsed text."""
        limit = self._budget.max_text_chars
        if len(self._text) - self._at > limit:
            raise self._budget.refuse_text("An item of a JSON array dataset")
        dropped = self._text[: self._at]
        breaks = dropped.count("\n")
        self._lines_before += breaks
        self._column_before = len(dropped) - dropped.rfind("\n") - 1 if breaks else self._column_before + len(dropped)
        read = [self._text[self._at :]]
        chars = len(read[0])
        del dropped
        self._text, self._at = "", 0  # the old text is freed before the new one is joined
        while chars < max(wanted, 1) and chars <= limit:
            piece = next(self._pieces, None)
            if piece is None:
                self._ended = True
                break
            read.append(piece)
            chars += len(piece)
        self._text = "".join(read)

    def _invalid(self, position: int) -> DatasetUnparseable:
        """Invalid JSON at `position` of the buffered text, located by line and column of the whole text."""
        breaks = self._text.count("\n", 0, position)
        line = self._lines_before + breaks + 1
        column = position - self._text.rfind("\n", 0, position) if breaks else self._column_before + position + 1
        return DatasetUnparseable(f"JSON dataset is invalid at line {line} column {column}")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)
_JSON_SPACE = re.compile(r"[ \t\n\r]*")
# A token cut off where the read text ends fails within this many characters of the end (a literal, a number's
# exponent, a \\uXXXX escape): more text may complete it. A failure earlier is in the text already read.
_LONGEST_TOKEN_CHARS = 8


def _loads(text: str) -> Any:
    return _DECODER.decode(text)


def _observe_object(columns: dict[str, _ColumnStats], record: dict[str, Any], rows: _RowCounter) -> None:
    # Columns are ordered by first appearance; a key missing from a row counts as null there.
    for name, value in record.items():
        column = columns.get(name)
        if column is None:
            column = columns[name] = rows.column(name, len(columns))
        column.observe_json(value)


def _columns_csv(columns: list[dict[str, Any]]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(_CSV_SUMMARY_HEADER)
    for column in columns:
        writer.writerow(["" if column[key] is None else column[key] for key in _CSV_SUMMARY_HEADER])
    return out.getvalue()
