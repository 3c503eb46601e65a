"""analyze_dataset in chunks, for the durable worker (mcp_backend.jobs.durable): an s3:// CSV or JSON Lines dataset
read in ranged GetObjects of DURABLE_CHUNK_BYTES, one partial aggregate per chunk, merged at the end into the same
answer analyze_dataset gives.

A chunk ends at its last complete record (a CSV record may hold quoted line breaks: a chunk's last record is left
to the next chunk, which starts where it starts); the next chunk's cursor (its byte offset, the rows and lines before
it, the CSV header) is part of the chunk's checkpoint. A partial keeps each column's counts, min, max and mean, and
its distinct values as 64-bit digests (stable across processes, unlike hash()), at most DURABLE_DISTINCT_ENTRIES of
them per chunk so a partial stays far below one checkpoint's size limit; a column past that is flagged capped, as
analyze_dataset flags one past its own bound. A JSON array, held whole anyway, and an https:// dataset run whole in
one chunk.
"""

from __future__ import annotations

import csv
import hashlib
import math
from collections.abc import Hashable, Iterator
from typing import Any

from pydantic import ValidationError

from mcp_backend.netsafety import redact_url
from mcp_backend.tools import analyze_dataset as analysis
from mcp_backend.tools.analyze_dataset import AnalysisBudget, AnalyzeInput, _ColumnStats
from mcp_backend.tools.context import ToolContext
from mcp_backend.tools.dataset_access import check_s3_dataset_access
from mcp_backend.tools.errors import DatasetOverBudget, DatasetTooLarge, DatasetUnparseable, InvalidToolInput
from mcp_backend.tools.fetch import read_s3_range, split_s3_url
from mcp_backend.validation import describe_validation_error

# One chunk's ranged read: a few seconds of S3 throughput, and memory for its bytes and lines.
DURABLE_CHUNK_BYTES = 8 * 1024 * 1024
# A dataset read in more chunks than this is refused at the plan: every chunk is an operation of the execution's
# history, which has its own bound.
MAX_DURABLE_CHUNKS = 5_000
# Distinct-value digests one chunk's partial keeps (all columns together): about 20 bytes each in its JSON.
DURABLE_DISTINCT_ENTRIES = 8_000
# A chunk with no complete record is read again, longer, up to this many times DURABLE_CHUNK_BYTES.
MAX_CHUNK_GROWTH = 16
# The format is read from the dataset's first bytes when its name does not tell.
_PEEK_BYTES = 4096
# A dataset this large is read only once its user confirms (hours of reading, counted against their jobs).
DURABLE_CONFIRM_ABOVE_BYTES = 10 * 1024 * 1024 * 1024


def _request(arguments: dict[str, Any]) -> AnalyzeInput:
    try:
        return AnalyzeInput.model_validate(arguments)
    except ValidationError as error:
        raise InvalidToolInput(f"analyze_dataset: {describe_validation_error(error)}") from None


class DatasetChunks:
    """analyze_dataset's ChunkedJob (mcp_backend.jobs.durable)."""

    def plan(self, arguments: dict[str, Any], context: ToolContext) -> dict[str, Any]:
        request = _request(arguments)
        check_s3_dataset_access(request.dataset_url, context.user_id, context.fetch_policy)
        start = {"offset": 0, "rows": 0, "lines": 0, "header": None}
        if split_s3_url(request.dataset_url) is None:
            return {"mode": "whole", "start": start}
        head, size = read_s3_range(request.dataset_url, context.fetch_policy, 0, _PEEK_BYTES - 1)
        first = head.decode("utf-8-sig", errors="ignore").lstrip()[:1]
        dataset_format = analysis._detect_format(request.dataset_url, first)
        if dataset_format == "json":
            return {"mode": "whole", "start": start}
        chunks = -(-size // DURABLE_CHUNK_BYTES)
        if chunks > MAX_DURABLE_CHUNKS:
            raise DatasetTooLarge(
                f"Dataset {redact_url(request.dataset_url)} is {size} bytes, over the "
                f"{MAX_DURABLE_CHUNKS * DURABLE_CHUNK_BYTES}-byte limit of a durable analysis"
            )
        plan: dict[str, Any] = {
            "mode": "chunks",
            "format": dataset_format,
            "size": size,
            "chunkBytes": DURABLE_CHUNK_BYTES,
            "start": start,
        }
        if size > DURABLE_CONFIRM_ABOVE_BYTES:
            plan["question"] = f"Analyse {size:,} bytes in {chunks:,} chunks? A run this large takes hours."
        return plan

    def chunk(
        self, arguments: dict[str, Any], plan: dict[str, Any], cursor: dict[str, Any], context: ToolContext
    ) -> dict[str, Any]:
        request = _request(arguments)
        if plan["mode"] == "whole":
            result = analysis.run(request, context)
            return {"partial": result, "next": None, "fraction": 1.0}
        offset, size = int(cursor["offset"]), int(plan["size"])
        length = int(plan["chunkBytes"])
        # A chunk that holds no complete record (a long line, a record with quoted line breaks) is read again,
        # twice as long, up to MAX_CHUNK_GROWTH times the chunk size.
        while True:
            partial, last = self._read(request, plan, cursor, offset, length, context)
            if partial is not None and (partial.consumed or last):
                break
            if length >= int(plan["chunkBytes"]) * MAX_CHUNK_GROWTH:
                raise DatasetOverBudget(
                    f"A record is longer than the {length}-byte read a durable analysis makes at most at once"
                )
            length *= 2
        position = offset + partial.consumed
        following = None if last or partial.truncated else {**partial.cursor(), "offset": position}
        return {"partial": partial.export(), "next": following, "fraction": position / size if size else 1.0}

    def _read(
        self,
        request: AnalyzeInput,
        plan: dict[str, Any],
        cursor: dict[str, Any],
        offset: int,
        length: int,
        context: ToolContext,
    ) -> tuple[_ChunkPartial | None, bool]:
        """The records of `length` bytes from `offset` (None when they hold no line end), and whether they reach
        the dataset's end."""
        end = min(offset + length, int(plan["size"]))
        data = read_s3_range(request.dataset_url, context.fetch_policy, offset, end - 1)[0] if end > offset else b""
        last = end >= int(plan["size"])
        if not last:
            cut = data.rfind(b"\n")
            if cut == -1:
                return None, last
            data = data[: cut + 1]
        partial = _ChunkPartial(request, cursor, last=last, first=offset == 0)
        if plan["format"] == "csv":
            partial.read_csv(data)
        else:
            partial.read_json_lines(data)
        return partial, last

    def merge(self, arguments: dict[str, Any], plan: dict[str, Any], partials: list[Any]) -> dict[str, Any]:
        request = _request(arguments)
        if plan["mode"] == "whole":
            return dict(partials[0])
        columns: dict[str, _Merged] = {}
        rows = bytes_read = 0
        truncated = False
        for part in partials:
            rows += int(part["rows"])
            bytes_read += int(part["bytes"])
            truncated = truncated or bool(part["truncated"])
            for column in part["columns"]:
                columns.setdefault(column["name"], _Merged(column["name"])).add(column)
        result: dict[str, Any] = {
            "datasetUrl": redact_url(request.dataset_url),
            "format": plan["format"],
            "rowCount": rows,
            "truncated": truncated,
            "columns": [column.summary(rows) for column in columns.values()],
            "bytesRead": bytes_read,
        }
        if request.options.output_format == "csv":
            result["columnsCsv"] = analysis._columns_csv(result["columns"])
        return result


class _DigestColumn(_ColumnStats):
    """A column whose distinct values are kept as digests that mean the same in every process."""

    def observe(self, key: Hashable, number: float | None) -> None:
        super().observe(_digest(key), number)

    def export(self) -> dict[str, Any]:
        has_numbers = self.numeric and self.non_null > 0
        return {
            "name": self.name,
            "nonNull": self.non_null,
            "numeric": self.numeric,
            "min": self.minimum if has_numbers else None,
            "max": self.maximum if has_numbers else None,
            "mean": self.mean if has_numbers else None,
            "distinct": sorted(str(key) for key in self._distinct),
            "capped": self.distinct_capped,
        }


def _digest(key: Hashable) -> str:
    if isinstance(key, tuple) and key and key[0] == "number":
        try:
            key = ("number", float(key[1]))  # 1 and 1.0 are one value, as analyze_dataset counts them
        except OverflowError:
            pass
    return hashlib.blake2b(repr(key).encode(), digest_size=8).hexdigest()


class _ChunkPartial:
    """One chunk's rows counted into its columns."""

    def __init__(self, request: AnalyzeInput, cursor: dict[str, Any], *, last: bool, first: bool) -> None:
        self._max_rows = request.options.max_rows
        self._rows_before = int(cursor["rows"])
        self._lines_before = int(cursor["lines"])
        self._header: list[str] | None = cursor.get("header")
        self._last = last
        self._first = first
        budget = AnalysisBudget(64 * 1024 * 1024)
        budget.distinct_left = DURABLE_DISTINCT_ENTRIES
        self._budget = budget
        self.rows = 0
        self.lines = 0
        self.consumed = 0
        self.lines_at_consumed = 0
        self.truncated = False
        self.columns: dict[str, _DigestColumn] = {}

    def _column(self, name: str) -> _DigestColumn:
        column = self.columns.get(name)
        if column is None:
            if len(self.columns) >= analysis.MAX_COLUMNS:
                raise DatasetOverBudget(
                    f"Dataset has more than {analysis.MAX_COLUMNS} columns, the most one analysis summarises"
                )
            column = self.columns[name] = _DigestColumn(name, self._budget)
        return column

    def _full(self) -> bool:
        return self._max_rows is not None and self._rows_before + self.rows >= self._max_rows

    def _lines_of(self, data: bytes, counted: list[int]) -> Iterator[str]:
        """The chunk's lines as text; `counted[0]` is the bytes of the lines handed out so far."""
        start = 0
        while start < len(data):
            end = data.find(b"\n", start)
            end = len(data) if end == -1 else end + 1
            piece = data[start:end]
            try:
                text = piece.decode("utf-8-sig" if start == 0 and self._first else "utf-8")
            except UnicodeDecodeError:
                line = self._lines_before + self.lines + 1
                raise DatasetUnparseable(f"Dataset is not valid UTF-8 text (at line {line})") from None
            counted[0] = end
            self.lines += 1
            start = end
            yield text

    def read_csv(self, data: bytes) -> None:
        counted = [0]
        reader = csv.reader(self._lines_of(data, counted))
        try:
            if self._header is None:
                self._header = self._read_header(reader)
                self._mark(counted[0])
            for name in self._header:
                self._column(name)
            # A chunk's last record may be cut by the chunk's end: the next chunk counts it, from its start.
            held: tuple[list[str], int, int] | None = None
            for record in reader:
                if held is not None and not self._count_csv(*held):
                    return
                held = (record, counted[0], self.lines)
            if held is not None and self._last:
                self._count_csv(*held)
        except csv.Error:
            raise DatasetUnparseable(
                f"CSV dataset is malformed at data row {self._rows_before + self.rows + 1}"
            ) from None

    def _mark(self, consumed: int, lines: int | None = None) -> None:
        """The chunk's rows so far are complete up to byte `consumed` (and line `lines`)."""
        self.consumed = consumed
        self.lines_at_consumed = self.lines if lines is None else lines

    def _read_header(self, reader: Iterator[list[str]]) -> list[str]:
        header = next((record for record in reader if record), None)
        if header is None:
            raise DatasetUnparseable("CSV dataset is empty: it has no header row")
        if len(set(header)) != len(header):
            raise DatasetUnparseable("CSV header repeats a column name")
        return header

    def _count_csv(self, record: list[str], consumed: int, lines: int) -> bool:
        """Count one record that ends at byte `consumed`; False once max_rows is reached (nothing counted)."""
        header = self._header or []
        if record:
            if self._full():
                self.truncated = True
                return False
            if len(record) != len(header):
                raise DatasetUnparseable(
                    f"CSV data row {self._rows_before + self.rows + 1} has {len(record)} fields; the header has "
                    f"{len(header)}"
                )
            for name, value in zip(header, record, strict=True):
                self.columns[name].observe_text(value)
            self.rows += 1
        self._mark(consumed, lines)
        return True

    def read_json_lines(self, data: bytes) -> None:
        counted = [0]
        for text in self._lines_of(data, counted):
            line_number = self._lines_before + self.lines
            if text.strip():
                if self._full():
                    self.truncated = True
                    return
                try:
                    record = analysis._loads(text)
                except (ValueError, RecursionError):
                    raise DatasetUnparseable(f"JSON Lines dataset has invalid JSON on line {line_number}") from None
                if not isinstance(record, dict):
                    raise DatasetUnparseable(f"JSON Lines dataset line {line_number} is not a JSON object")
                for name, value in record.items():
                    self._column(name).observe_json(value)
                self.rows += 1
            self._mark(counted[0])

    def cursor(self) -> dict[str, Any]:
        return {
            "rows": self._rows_before + self.rows,
            "lines": self._lines_before + self.lines_at_consumed,
            "header": self._header,
        }

    def export(self) -> dict[str, Any]:
        return {
            "rows": self.rows,
            "bytes": self.consumed,
            "truncated": self.truncated,
            "columns": [column.export() for column in self.columns.values()],
        }


class _Merged:
    """One column over every chunk."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.non_null = 0
        self.numeric = True
        self.minimum = math.inf
        self.maximum = -math.inf
        self.mean = 0.0
        self.distinct: set[str] = set()
        self.capped = False

    def add(self, part: dict[str, Any]) -> None:
        count = int(part["nonNull"])
        self.numeric = self.numeric and bool(part["numeric"])
        if self.numeric and count and part["mean"] is not None:
            self.minimum = min(self.minimum, float(part["min"]))
            self.maximum = max(self.maximum, float(part["max"]))
            self.mean += (float(part["mean"]) - self.mean) * count / (self.non_null + count)
        self.non_null += count
        self.capped = self.capped or bool(part["capped"])
        if len(self.distinct) <= analysis.DISTINCT_COUNT_BOUND:
            self.distinct.update(part["distinct"])

    def summary(self, row_count: int) -> dict[str, Any]:
        is_number = self.numeric and self.non_null > 0
        capped = self.capped or len(self.distinct) > analysis.DISTINCT_COUNT_BOUND
        if self.non_null == 0:
            column_type = "empty"
        else:
            column_type = "number" if is_number else "string"
        return {
            "name": self.name,
            "type": column_type,
            "nullCount": row_count - self.non_null,
            "distinctCount": min(len(self.distinct), analysis.DISTINCT_COUNT_BOUND),
            "distinctCountCapped": capped,
            "min": self.minimum if is_number else None,
            "max": self.maximum if is_number else None,
            "mean": self.mean if is_number else None,
        }
