"""The call-log-telemetry extension's logic: platform telemetry folded into call-log records, and a
shipper that never makes its caller wait for Kinesis or fail when it is down."""

from __future__ import annotations

import json
import threading
import time

from botocore.exceptions import EndpointConnectionError

from mcp_backend.calllog.models import CallLogEventType, CallLogRecord
from mcp_backend.calllog.shipper import RecordShipper
from mcp_backend.calllog.writer import CallLogWriter
from mcp_backend.telemetry_extension.reports import ReportFolder


def report(request_id: str, *, init: float | None = None, status: str | None = None) -> dict:
    metrics = {"durationMs": 12.5, "billedDurationMs": 13, "memorySizeMB": 512, "maxMemoryUsedMB": 80}
    if init is not None:
        metrics["initDurationMs"] = init
    record = {"requestId": request_id, "metrics": metrics}
    if status:
        record["status"] = status
    return {"time": "2026-11-30T12:00:00.000Z", "type": "platform.report", "record": record}


def runtime_done(request_id: str, status: str) -> dict:
    record = {"requestId": request_id, "status": status, "metrics": {"durationMs": 12.0}}
    return {"time": "2026-11-30T12:00:00.000Z", "type": "platform.runtimeDone", "record": record}


def test_each_report_becomes_one_record_with_its_status_and_cold_start():
    # Given the platform events of a cold invocation that succeeded and a warm one that timed out
    folder = ReportFolder("mcp-backend-ToolWorker")
    events = [
        {"time": "2026-11-30T12:00:00.000Z", "type": "platform.initStart", "record": {"phase": "init"}},
        runtime_done("r-1", "success"),
        report("r-1", init=420.0),
        runtime_done("r-2", "timeout"),
        report("r-2"),
    ]

    # When one delivery is folded
    records = folder.fold(events)

    # Then there is one platform_report per invocation, cold only for the first
    assert [(r.request_id, r.status, r.cold_start) for r in records] == [
        ("r-1", "success", True),
        ("r-2", "timeout", False),
    ]
    first = records[0]
    assert first.event_type is CallLogEventType.PLATFORM_REPORT and first.function_name == "mcp-backend-ToolWorker"
    assert (first.init_duration_ms, first.billed_duration_ms, first.max_memory_used_mb) == (420.0, 13, 80)
    assert first.partition_key == "function#mcp-backend-ToolWorker"


def test_a_report_carrying_its_own_status_wins():
    # Given a report that carries a status (schema 2022-12-13)
    folder = ReportFolder("fn")

    # When it is folded without a runtimeDone before it
    [record] = folder.fold([report("r-3", status="error")])

    # Then that status is recorded
    assert record.status == "error"


def test_malformed_telemetry_is_counted_and_skipped():
    # Given deliveries that are not what the Telemetry API sends, next to one good report
    folder = ReportFolder("fn")

    # When they are folded
    good = folder.fold(
        [{"type": "platform.report"}, {"record": {}}, "text", report("r-4"), report("r-5") | {"time": "yesterday"}]
    )
    nothing = folder.fold({"not": "a list"})

    # Then only the good report becomes a record, and each bad one is counted
    assert [r.request_id for r in good] == ["r-4"] and nothing == []
    assert folder.malformed == 5


class StalledKinesis:
    """A Kinesis client whose PutRecords hangs, then fails to connect."""

    def __init__(self, hang_seconds: float) -> None:
        self.hang = hang_seconds
        self.calls = 0

    def put_records(self, **_: object) -> dict:
        self.calls += 1
        time.sleep(self.hang)
        raise EndpointConnectionError(endpoint_url="http://127.0.0.1:9")


def record(n: int) -> CallLogRecord:
    return ReportFolder("fn").fold([report(f"r-{n}")])[0]


def test_a_stalled_stream_never_blocks_the_caller_and_its_losses_are_counted():
    # Given a shipper over a stream that hangs and then refuses
    kinesis = StalledKinesis(hang_seconds=0.3)
    shipper = RecordShipper(CallLogWriter("calls", kinesis, max_attempts=2, sleep=lambda _: None), 0.05, batch=1)

    # When records are added (as the telemetry listener does for each delivery)
    started = time.monotonic()
    for n in range(3):
        shipper.add([record(n)])
    added_in = time.monotonic() - started
    shipper.close(budget_seconds=3)

    # Then adding returned at once, nothing raised, and every record is counted as dropped
    assert added_in < kinesis.hang
    assert (shipper.written, shipper.dropped) == (0, 3)
    assert kinesis.calls >= 1


def test_shutdown_flushes_what_is_pending():
    # Given a shipper with a long interval and records waiting
    sent: list[list[dict]] = []

    class Kinesis:
        def put_records(self, StreamName: str, Records: list[dict]) -> dict:
            sent.append([json.loads(entry["Data"]) for entry in Records])
            return {"Records": [{} for _ in Records], "FailedRecordCount": 0}

    shipper = RecordShipper(CallLogWriter("calls", Kinesis()), interval_seconds=60, batch=100)
    shipper.add([record(1), record(2)])

    # When SHUTDOWN closes it
    closer = threading.Thread(target=shipper.close, args=(2,))
    closer.start()
    closer.join(5)

    # Then both records were written before it returned
    assert [r["requestId"] for batch in sent for r in batch] == ["r-1", "r-2"]
    assert (shipper.written, shipper.dropped) == (2, 0)
