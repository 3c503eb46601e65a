"""analyze_dataset: input validation, format detection and the statistics it reports."""

from __future__ import annotations

import csv
import io
import json
import socket
from typing import Any

import httpx
import pytest
from pydantic import ValidationError

from mcp_backend.tools import analyze_dataset as module
from mcp_backend.tools.analyze_dataset import AnalyzeInput, AnalyzeOptions, analyze_dataset
from mcp_backend.tools.dataset_stream import FetchPolicy
from mcp_backend.tools.errors import (
    DatasetTemporarilyUnreachable,
    DatasetTooLarge,
    DatasetUnparseable,
    DatasetUnreachable,
    UnsafeDatasetUrl,
)

HOST = "data.example.com"
PEOPLE_CSV = b"id,name,score,notes\n1,alice,9.5,\n2,bob,7,x\n3,carol,,y\n"


@pytest.fixture
def files(monkeypatch: pytest.MonkeyPatch) -> dict[str, bytes]:
    """path -> body served over https by HOST, which resolves to a public address."""
    served: dict[str, bytes] = {}

    def getaddrinfo(host: str, port: int, *args: object, **kwargs: object) -> list[tuple]:
        if host != HOST:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.216.34", port))]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return served


def transport_for(files: dict[str, bytes]) -> httpx.MockTransport:
    def handle(request: httpx.Request) -> httpx.Response:
        body = files.get(request.url.path)
        return httpx.Response(200, content=body) if body is not None else httpx.Response(404)

    return httpx.MockTransport(handle)


def analyze(files: dict[str, bytes], path: str, policy: FetchPolicy | None = None, **options: Any) -> dict[str, Any]:
    request = AnalyzeInput(dataset_url=f"https://{HOST}{path}", options=AnalyzeOptions(**options))
    return analyze_dataset(request, policy=policy or FetchPolicy(), transport=transport_for(files))


def column(result: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in result["columns"] if c["name"] == name)


# --- input model -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "arguments",
    [
        {"dataset_url": "https://h/d.csv", "unexpected": 1},
        {"dataset_url": "https://h/d.csv", "options": {"output_format": "xml"}},
        {"dataset_url": "https://h/d.csv", "options": {"max_rows": 0}},
        {"dataset_url": "https://h/d.csv", "options": {"max_rows": 1_000_001}},
        {"dataset_url": "https://h/d.csv", "options": {"maxRows": 5}},
        {"dataset_url": "ftp://h/d.csv"},
        {"dataset_url": "s3://bucket-only"},
        {"dataset_url": "https:///no-host.csv"},
        {"dataset_url": "https://h/d.csv\n"},
        {"dataset_url": "https://h/" + "a" * 2048},
        {},
    ],
)
def test_invalid_arguments_are_rejected_by_the_input_model(arguments: dict[str, Any]) -> None:
    # Given arguments that break the tool's contract
    # When they are validated
    # Then pydantic rejects them
    with pytest.raises(ValidationError):
        AnalyzeInput.model_validate(arguments)


def test_validation_errors_do_not_echo_the_url() -> None:
    # Given a rejected URL carrying credentials
    # When it is validated
    with pytest.raises(ValidationError) as raised:
        AnalyzeInput.model_validate({"dataset_url": "ftp://bob:s3cret@h/d.csv"})

    # Then the error text does not contain them
    assert "s3cret" not in str(raised.value)


def test_valid_arguments_get_defaults() -> None:
    # Given only a URL
    # When it is validated
    request = AnalyzeInput.model_validate({"dataset_url": "s3://bucket/path/d.csv"})

    # Then the options take their defaults
    assert request.options == AnalyzeOptions(max_rows=None, output_format="json")


# --- CSV over https ----------------------------------------------------------------------------------


def test_csv_statistics(files: dict[str, bytes]) -> None:
    # Given a small CSV with numeric, string and partly empty columns
    files["/people.csv"] = PEOPLE_CSV

    # When it is analysed
    result = analyze(files, "/people.csv")

    # Then the shape and per-column statistics are exact
    assert result["format"] == "csv"
    assert result["rowCount"] == 3
    assert result["truncated"] is False
    assert result["bytesRead"] == len(PEOPLE_CSV)
    assert result["datasetUrl"] == f"https://{HOST}/people.csv"
    assert "columnsCsv" not in result
    assert [c["name"] for c in result["columns"]] == ["id", "name", "score", "notes"]
    assert column(result, "id") == {
        "name": "id",
        "type": "number",
        "nullCount": 0,
        "distinctCount": 3,
        "distinctCountCapped": False,
        "min": 1.0,
        "max": 3.0,
        "mean": 2.0,
    }
    assert column(result, "score") == {
        "name": "score",
        "type": "number",
        "nullCount": 1,
        "distinctCount": 2,
        "distinctCountCapped": False,
        "min": 7.0,
        "max": 9.5,
        "mean": 8.25,
    }
    assert column(result, "name")["type"] == "string"
    assert column(result, "name")["min"] is None
    assert column(result, "notes")["nullCount"] == 1
    assert column(result, "notes")["distinctCount"] == 2


def test_numeric_versus_string_inference(files: dict[str, bytes]) -> None:
    # Given columns of numbers, near-numbers, mixed values and only empties
    files["/kinds.csv"] = (
        b"ints,floats,mixed,spaced,special,blank\n1,-1.5e3,1,1,nan,\n2,.25,x,2 ,inf,\n10,3.,3,3,1_000,\n"
    )

    # When it is analysed
    result = analyze(files, "/kinds.csv")

    # Then only plain decimal numbers make a column numeric
    types = {c["name"]: c["type"] for c in result["columns"]}
    assert types == {
        "ints": "number",
        "floats": "number",
        "mixed": "string",
        "spaced": "string",
        "special": "string",
        "blank": "empty",
    }
    assert column(result, "floats")["min"] == -1500.0
    assert column(result, "floats")["max"] == 3.0
    assert column(result, "mixed")["mean"] is None
    assert column(result, "blank")["nullCount"] == 3


def test_quoted_csv_fields_with_commas_and_newlines(files: dict[str, bytes]) -> None:
    # Given quoted fields containing the delimiter and a line break, with CRLF line ends and a BOM
    files["/q.csv"] = b'\xef\xbb\xbfname,comment\r\n"a","x, y"\r\n"b","two\nlines"\r\n\r\n'

    # When it is analysed
    result = analyze(files, "/q.csv")

    # Then records are split correctly and the BOM is not part of the first column name
    assert result["rowCount"] == 2
    assert [c["name"] for c in result["columns"]] == ["name", "comment"]
    assert column(result, "comment")["distinctCount"] == 2


def test_max_rows_truncates(files: dict[str, bytes]) -> None:
    # Given a CSV of five rows
    files["/five.csv"] = b"n\n1\n2\n3\n4\n5\n"

    # When at most two rows are analysed
    result = analyze(files, "/five.csv", max_rows=2)

    # Then two are counted and the result says it was truncated
    assert result["rowCount"] == 2
    assert result["truncated"] is True
    assert column(result, "n")["max"] == 2.0


def test_max_rows_equal_to_the_row_count_is_not_truncation(files: dict[str, bytes]) -> None:
    # Given a CSV of five rows
    files["/five.csv"] = b"n\n1\n2\n3\n4\n5\n"

    # When max_rows is exactly five
    result = analyze(files, "/five.csv", max_rows=5)

    # Then every row is analysed and nothing was cut off
    assert result["rowCount"] == 5
    assert result["truncated"] is False


def test_distinct_count_is_capped_at_the_bound(files: dict[str, bytes], monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a bound of 3, a column with 4 distinct values (one past it) and one with exactly 3
    monkeypatch.setattr(module, "DISTINCT_COUNT_BOUND", 3)
    files["/d.csv"] = b"many,few\na,x\nb,y\nc,z\nd,x\na,y\n"

    # When it is analysed
    result = analyze(files, "/d.csv")

    # Then the wide column reports the bound, flagged; the narrow one its exact count
    assert column(result, "many")["distinctCount"] == 3
    assert column(result, "many")["distinctCountCapped"] is True
    assert column(result, "few")["distinctCount"] == 3
    assert column(result, "few")["distinctCountCapped"] is False


def test_csv_output_format_adds_a_columns_table(files: dict[str, bytes]) -> None:
    # Given the people CSV
    files["/people.csv"] = PEOPLE_CSV

    # When it is analysed with output_format csv
    result = analyze(files, "/people.csv", output_format="csv")

    # Then columnsCsv is a CSV table with one row per column
    table = list(csv.reader(io.StringIO(result["columnsCsv"])))
    assert table[0] == ["name", "type", "nullCount", "distinctCount", "min", "max", "mean"]
    assert table[1] == ["id", "number", "0", "3", "1.0", "3.0", "2.0"]
    assert table[2] == ["name", "string", "0", "3", "", "", ""]
    assert len(table) == 5


def test_progress_is_reported_at_start_every_thousand_rows_and_at_the_end(files: dict[str, bytes]) -> None:
    # Given a CSV of 2500 rows
    files["/long.csv"] = b"n\n" + b"".join(b"%d\n" % i for i in range(2500))
    calls: list[tuple[float, str]] = []

    # When it is analysed with a progress callback
    request = AnalyzeInput(dataset_url=f"https://{HOST}/long.csv")
    analyze_dataset(
        request,
        policy=FetchPolicy(),
        transport=transport_for(files),
        progress=lambda f, m: calls.append((f, m)),
    )

    # Then progress goes 0.0, two intermediate fractions, 1.0, never backwards
    fractions = [fraction for fraction, _message in calls]
    assert len(calls) == 4
    assert fractions[0] == 0.0
    assert fractions[-1] == 1.0
    assert all(0.0 < f < 1.0 for f in fractions[1:3])
    assert fractions == sorted(fractions)
    assert calls[1][1] == "Analyzed 1000 rows"


# --- JSON --------------------------------------------------------------------------------------------


def test_json_array_statistics(files: dict[str, bytes]) -> None:
    # Given a JSON array of objects with numbers, bools, nulls, nested values and a late column
    rows = [
        {"id": 1, "flag": True, "tags": ["a"], "price": None},
        {"id": 2, "flag": 1, "tags": ["a"], "price": 2.5},
        {"id": 3, "flag": False, "tags": {"k": 1}, "price": 4.5, "late": "x"},
    ]
    files["/rows.json"] = json.dumps(rows).encode()

    # When it is analysed
    result = analyze(files, "/rows.json")

    # Then bools are not numbers, true and 1 are distinct, and a missing key counts as null
    assert result["format"] == "json"
    assert result["rowCount"] == 3
    assert [c["name"] for c in result["columns"]] == ["id", "flag", "tags", "price", "late"]
    assert column(result, "id")["mean"] == 2.0
    assert column(result, "flag")["type"] == "string"
    assert column(result, "flag")["distinctCount"] == 3
    assert column(result, "tags")["distinctCount"] == 2
    assert column(result, "price") == {
        "name": "price",
        "type": "number",
        "nullCount": 1,
        "distinctCount": 2,
        "distinctCountCapped": False,
        "min": 2.5,
        "max": 4.5,
        "mean": 3.5,
    }
    assert column(result, "late")["nullCount"] == 2


def test_json_lines_statistics(files: dict[str, bytes]) -> None:
    # Given JSON Lines with a blank line and a key only some rows have
    files["/rows.jsonl"] = b'{"a": 1, "b": "x"}\n\n{"a": 3}\r\n{"a": 5, "b": null}\n'

    # When it is analysed
    result = analyze(files, "/rows.jsonl")

    # Then each non-blank line is a row
    assert result["format"] == "jsonl"
    assert result["rowCount"] == 3
    assert column(result, "a")["mean"] == 3.0
    assert column(result, "b")["nullCount"] == 2
    assert column(result, "b")["type"] == "string"


@pytest.mark.parametrize(
    ("body", "expected_format"),
    [(b'  \n[{"a": 1}]', "json"), (b'{"a": 1}\n{"a": 2}\n', "jsonl"), (b"a\n1\n", "csv")],
)
def test_format_is_sniffed_when_the_url_has_no_known_suffix(
    files: dict[str, bytes], body: bytes, expected_format: str
) -> None:
    # Given a dataset at a path without a suffix
    files["/export"] = body

    # When it is analysed
    result = analyze(files, "/export")

    # Then the first non-whitespace byte decides the format
    assert result["format"] == expected_format


def test_json_array_max_rows_truncates(files: dict[str, bytes]) -> None:
    # Given a JSON array of four objects
    files["/rows.json"] = json.dumps([{"v": i} for i in range(4)]).encode()

    # When at most three are analysed
    result = analyze(files, "/rows.json", max_rows=3)

    # Then three are counted and truncation is reported
    assert (result["rowCount"], result["truncated"]) == (3, True)


def analyze_in_chunks(body: bytes, size: int) -> dict[str, Any]:
    """The analysis of `body` served `size` bytes at a time (a network may cut it anywhere)."""
    pieces = [body[start : start + size] for start in range(0, len(body), size)]
    request = AnalyzeInput(dataset_url=f"https://{HOST}/rows.json")
    served = httpx.MockTransport(lambda _: httpx.Response(200, content=iter(pieces)))
    return analyze_dataset(request, policy=FetchPolicy(), transport=served)


@pytest.mark.parametrize("size", [1, 2, 3, 7, 64])
def test_a_json_array_cut_anywhere_is_read_as_the_whole(files: dict[str, bytes], size: int) -> None:
    # Given a JSON array whose numbers, literals, escapes and multi-byte characters a cut could split
    rows = [
        {"n": 1234567 * i, "f": -1.5e-3 * i, "t": i % 2 == 0, "z": None, "s": f'caf\u00e9 \\"{i}\\" \U0001f600'}
        for i in range(40)
    ]
    body = (
        "[\n  " + ",\n  ".join(json.dumps(row, ensure_ascii=i % 2 == 0) for i, row in enumerate(rows)) + "\n]\n"
    ).encode()
    files["/rows.json"] = body

    # When it is served whole, and cut every `size` bytes / Then both analyses are the same
    assert analyze_in_chunks(body, size) == analyze(files, "/rows.json")


def test_invalid_json_in_a_streamed_array_is_located_in_the_whole_text(files: dict[str, bytes]) -> None:
    # Given an array whose fault is on its third line, read in small pieces
    body = b'[\n  {"a": 1},\n  {"a": 2,, "b": 3}\n]'

    # When it is analysed / Then the fault is located as json locates it in the whole text
    with pytest.raises(DatasetUnparseable, match="at line 3 column 11"):
        analyze_in_chunks(body, 4)


# --- unparseable data --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "body", "expected"),
    [
        ("/bad.json", b'[{"a": 1}, {"a": SECRET}]', "line 1 column"),
        ("/bad.jsonl", b'{"a": 1}\n{"a": SECRET\n', "line 2"),
        ("/bad.jsonl", b'{"a": 1}\n["SECRET"]\n', "line 2 is not a JSON object"),
        ("/bad.json", b'[{"a": 1}, "SECRET"]', "row 2 is not an object"),
        ("/bad.json", b'{"SECRET": 1', "invalid"),
        ("/bad.json", b'[{"a": NaN}]', "invalid"),
        ("/bad.csv", b"a,b\n1,2\nSECRET\n", "data row 2 has 1 fields"),
        ("/bad.csv", b"", "no header"),
        ("/bad.csv", b"a,a\n1,2\n", "column 2"),
        ("/bad.csv", b"a\nSECRET\xff\n", "UTF-8"),
    ],
)
def test_malformed_data_is_unparseable_without_echoing_it(
    files: dict[str, bytes], path: str, body: bytes, expected: str
) -> None:
    # Given a dataset that is not valid for its format
    files[path] = body

    # When it is analysed
    with pytest.raises(DatasetUnparseable) as raised:
        analyze(files, path)

    # Then the message locates the problem but does not quote the data
    assert expected in raised.value.message
    assert "SECRET" not in raised.value.message


# --- fetch failures surface unchanged ----------------------------------------------------------------


def test_plain_http_is_refused(files: dict[str, bytes]) -> None:
    # Given an http:// URL under the deployed (default) policy
    request = AnalyzeInput(dataset_url=f"http://{HOST}/people.csv")

    # When it is analysed
    # Then it is refused
    with pytest.raises(UnsafeDatasetUrl):
        analyze_dataset(request, policy=FetchPolicy(), transport=transport_for(files))


def test_missing_dataset_is_unreachable(files: dict[str, bytes]) -> None:
    # Given a URL the server does not have
    # When it is analysed
    # Then DatasetUnreachable names the status
    with pytest.raises(DatasetUnreachable, match="404"):
        analyze(files, "/nope.csv")


def test_dataset_over_the_cap_is_too_large(files: dict[str, bytes]) -> None:
    # Given the people CSV and a cap smaller than it
    files["/people.csv"] = PEOPLE_CSV

    # When it is analysed
    # Then it is refused as too large
    with pytest.raises(DatasetTooLarge):
        analyze(files, "/people.csv", policy=FetchPolicy(max_bytes=len(PEOPLE_CSV) - 1))


# --- S3 ----------------------------------------------------------------------------------------------


def test_s3_csv_statistics(s3: Any) -> None:
    # Given the people CSV in S3 under a key with no suffix
    s3.put_object(Bucket="datasets", Key="exports/people", Body=PEOPLE_CSV)

    # When it is analysed
    request = AnalyzeInput(dataset_url="s3://datasets/exports/people")
    result = analyze_dataset(request, policy=FetchPolicy(), s3_client=s3)

    # Then it is sniffed as CSV and summarised
    assert result["datasetUrl"] == "s3://datasets/exports/people"
    assert result["format"] == "csv"
    assert result["rowCount"] == 3
    assert result["bytesRead"] == len(PEOPLE_CSV)
    assert column(result, "score")["mean"] == 8.25


def test_missing_s3_object_is_unreachable(s3: Any) -> None:
    # Given a key that does not exist
    request = AnalyzeInput(dataset_url="s3://datasets/missing.csv")

    # When it is analysed
    # Then it is DatasetUnreachable
    with pytest.raises(DatasetUnreachable):
        analyze_dataset(request, policy=FetchPolicy(), s3_client=s3)


# --- permanent or transient: what the job worker retries -----------------------------------------------


def analyze_answered_by(handle: Any) -> None:
    request = AnalyzeInput(dataset_url=f"https://{HOST}/data.csv")
    analyze_dataset(request, policy=FetchPolicy(), transport=httpx.MockTransport(handle))


@pytest.mark.parametrize(
    ("answer", "transient"),
    [
        (lambda request: httpx.Response(403), False),
        (lambda request: httpx.Response(404), False),
        (lambda request: httpx.Response(410), False),
        (lambda request: httpx.Response(429), True),
        (lambda request: httpx.Response(408), True),
        (lambda request: httpx.Response(500), True),
        (lambda request: httpx.Response(503), True),
        (lambda request: (_ for _ in ()).throw(httpx.ConnectError("refused", request=request)), False),
        (lambda request: (_ for _ in ()).throw(httpx.ReadTimeout("slow", request=request)), True),
        (lambda request: (_ for _ in ()).throw(httpx.RemoteProtocolError("dropped", request=request)), True),
    ],
    ids=["403", "404", "410", "429", "408", "500", "503", "refused", "timeout", "dropped"],
)
def test_http_failures_say_whether_a_retry_can_help(files: dict[str, bytes], answer: Any, transient: bool) -> None:
    # Given a dataset server that answers with a status or fails the connection
    # When the dataset is analysed
    with pytest.raises(DatasetUnreachable) as raised:
        analyze_answered_by(answer)

    # Then the error's type says whether the failure is transient (4xx and refusals are not)
    assert raised.value.transient is transient
    assert isinstance(raised.value, DatasetTemporarilyUnreachable) is transient


class FailingS3:
    def __init__(self, code: str, status: int) -> None:
        self.error = {"Error": {"Code": code, "Message": "-"}, "ResponseMetadata": {"HTTPStatusCode": status}}

    def get_object(self, *, Bucket: str, Key: str) -> Any:
        from botocore.exceptions import ClientError

        raise ClientError(self.error, "GetObject")


@pytest.mark.parametrize(
    ("code", "status", "transient"),
    [
        ("NoSuchKey", 404, False),
        ("AccessDenied", 403, False),
        ("SlowDown", 503, True),
        ("InternalError", 500, True),
        ("RequestTimeout", 408, True),
    ],
)
def test_s3_failures_say_whether_a_retry_can_help(code: str, status: int, transient: bool) -> None:
    # Given S3 answering GetObject with an error
    request = AnalyzeInput(dataset_url="s3://datasets/data.csv")

    # When the dataset is analysed
    with pytest.raises(DatasetUnreachable) as raised:
        analyze_dataset(request, policy=FetchPolicy(), s3_client=FailingS3(code, status))

    # Then throttling and service errors are transient, a missing or forbidden object is not
    assert raised.value.transient is transient
