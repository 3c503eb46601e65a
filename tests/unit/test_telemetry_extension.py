"""The call-log-telemetry extension's logic: platform telemetry folded into call-log records, and a
shipper that never makes its caller wait for Kinesis or fail when it is down."""

from __future__ import annotations

import json
import threading
import time
import urllib.request

from botocore.exceptions import EndpointConnectionError

from mcp_backend.calllog.models import CallLogEventType, CallLogRecord
from mcp_backend.calllog.shipper import RecordShipper
from mcp_backend.calllog.writer import CallLogWriter
from mcp_backend.telemetry_extension.__main__ import SHUTDOWN_LIMIT_SECONDS, deadline_of
from mcp_backend.telemetry_extension.__main__ import main as telemetry_main
from mcp_backend.telemetry_extension.reports import ReportFolder


def report(request_id: str, *, init: float | None = None, status: str | None = None) -> dict:
    # A pinned stamp is safe: the extension carries an event's time into the call log as data, never compares it.
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


class RecordingKinesis:
    def __init__(self) -> None:
        self.request_ids: list[str] = []

    def put_records(self, StreamName: str, Records: list[dict]) -> dict:
        self.request_ids += [json.loads(entry["Data"])["requestId"] for entry in Records]
        return {"Records": [{} for _ in Records], "FailedRecordCount": 0}


class ScriptedLambda:
    """The Extensions API as the extension calls it, handing out the given events in order; it notes what the
    extension had done by each next-event call, and whom the extension subscribed for telemetry."""

    def __init__(self, events: list[dict], loaded: threading.Event) -> None:
        self.events = list(events)
        self.loaded = loaded
        self.loaded_when_asked: list[bool] = []
        self.handed: dict[str, threading.Event] = {"INVOKE": threading.Event(), "SHUTDOWN": threading.Event()}
        self.listener_port = 0

    def register(self, events: list[str]) -> dict:
        return {}

    def subscribe(self, uri: str, types: list[str]) -> None:
        self.listener_port = int(uri.rsplit(":", 1)[1])

    def next_event(self) -> dict:
        self.loaded_when_asked.append(self.loaded.is_set())
        event = self.events.pop(0)
        self.handed[event["eventType"]].set()
        return event

    def deliver(self, events: list[dict]) -> None:
        """What the Telemetry API does: POST a batch to the subscribed listener."""
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.listener_port}/", data=json.dumps(events).encode(), method="POST"
        )
        with urllib.request.urlopen(request, timeout=10):
            pass


def far_deadline() -> int:
    # Far enough that no wait here ends by its deadline: each one ends on the event it waits for.
    return int(time.time() * 1000) + 600_000


def run_extension(scripted: ScriptedLambda, kinesis: RecordingKinesis, gate: threading.Event) -> threading.Thread:
    def build(function_name: str, stream: str):
        gate.wait()  # the call-log code loading (pydantic, Powertools, boto3), as long as the test wants
        folder = ReportFolder(function_name)
        shipper = RecordShipper(CallLogWriter(stream, kinesis), interval_seconds=60, batch=100)
        scripted.loaded.set()
        return folder, shipper

    environ = {"CALL_LOG_STREAM_NAME": "calls", "AWS_LAMBDA_FUNCTION_NAME": "fn"}
    extension = threading.Thread(
        target=telemetry_main, args=(scripted, environ, build, 600.0), name="extension", daemon=True
    )
    extension.start()
    return extension


def test_after_an_invoke_the_extension_asks_for_its_next_event_only_once_its_code_is_loaded():
    # Given an extension whose call-log code is still loading when its first INVOKE comes, then SHUTDOWN
    loaded, gate, kinesis = threading.Event(), threading.Event(), RecordingKinesis()
    events = [
        {"eventType": "INVOKE", "requestId": "r-1", "deadlineMs": far_deadline()},
        {"eventType": "SHUTDOWN", "shutdownReason": "spindown", "deadlineMs": far_deadline()},
    ]
    scripted = ScriptedLambda(events, loaded)
    extension = run_extension(scripted, kinesis, gate)

    # When the invocation's report arrives and only then the code finishes loading
    assert scripted.handed["INVOKE"].wait(30)
    scripted.deliver([report("r-1")])
    gate.set()
    extension.join(30)

    # Then the event after the INVOKE was asked for with the code loaded (a SHUTDOWN never finds it loading),
    # and the report was shipped before the extension ended
    assert not extension.is_alive()
    assert scripted.loaded_when_asked == [False, True]
    assert kinesis.request_ids == ["r-1"]


def test_shutdown_waits_for_the_report_of_every_invocation_even_one_delivered_after_it():
    # Given an extension, loaded, told of two invocations and then SHUTDOWN
    loaded, gate, kinesis = threading.Event(), threading.Event(), RecordingKinesis()
    gate.set()
    events = [
        {"eventType": "INVOKE", "requestId": "r-1", "deadlineMs": far_deadline()},
        {"eventType": "INVOKE", "requestId": "r-2", "deadlineMs": far_deadline()},
        {"eventType": "SHUTDOWN", "shutdownReason": "spindown", "deadlineMs": far_deadline()},
    ]
    scripted = ScriptedLambda(events, loaded)
    extension = run_extension(scripted, kinesis, gate)

    # When the first report came before SHUTDOWN and the last one only after it (as the Telemetry API may)
    assert scripted.handed["INVOKE"].wait(30)
    scripted.deliver([report("r-1")])
    assert scripted.handed["SHUTDOWN"].wait(30)
    scripted.deliver([runtime_done("r-2", "success"), report("r-2")])
    extension.join(30)

    # Then both were shipped before the extension ended
    assert not extension.is_alive()
    assert sorted(kinesis.request_ids) == ["r-1", "r-2"]


def test_the_shutdown_deadline_is_the_events_and_never_past_lambdas_limit():
    now = time.monotonic()
    soon = {"eventType": "SHUTDOWN", "deadlineMs": int(time.time() * 1000) + 1000}
    late = {"eventType": "SHUTDOWN", "deadlineMs": int(time.time() * 1000) + 60_000}

    # The event's own deadline when it is sooner, else the 2 s limit; a margin before either
    assert deadline_of(soon, SHUTDOWN_LIMIT_SECONDS) - now < 1.0
    assert deadline_of(late, SHUTDOWN_LIMIT_SECONDS) - now <= SHUTDOWN_LIMIT_SECONDS


def test_init_events_alone_load_nothing_and_wait_for_the_first_records():
    # Given an extension whose environment reports its init, then shuts down before any invocation
    loaded, gate, kinesis = threading.Event(), threading.Event(), RecordingKinesis()
    gate.set()
    scripted = ScriptedLambda([{"eventType": "SHUTDOWN", "shutdownReason": "spindown"}], loaded)
    extension = run_extension(scripted, kinesis, gate)

    # When the Telemetry API delivers the init events only
    assert scripted.handed["SHUTDOWN"].wait(30)
    init = {"time": "2026-11-30T12:00:00.000Z", "type": "platform.initStart", "record": {"phase": "init"}}
    scripted.deliver([init])
    extension.join(30)

    # Then the extension ended without loading the call-log code, and shipped nothing
    assert not extension.is_alive()
    assert not loaded.is_set() and kinesis.request_ids == []


def test_an_environment_restored_from_a_snapstart_snapshot_counts_as_a_cold_start():
    # Given the report of a restored environment's first invocation (restoreDurationMs, no initDurationMs: init ran
    # when the version was published) and of its next one
    folder = ReportFolder("fn")
    restored = report("r-6")
    restored["record"]["metrics"]["restoreDurationMs"] = 180.0

    # When both are folded
    first, second = folder.fold([restored, report("r-7")])

    # Then the first is a cold start (without an init duration) and the second is not
    assert (first.cold_start, first.init_duration_ms) == (True, None)
    assert second.cold_start is False
