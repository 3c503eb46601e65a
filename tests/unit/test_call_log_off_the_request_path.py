"""The endpoint's call-log records leave the request path: a tools/call is answered while Kinesis has not
answered yet, and what is still pending when the server shuts down (Lambda's SIGTERM, uvicorn's lifespan
shutdown) is put before the shutdown completes; so are the tool-run metrics not yet written."""

from __future__ import annotations

import json
import threading
from typing import Any

import anyio

from mcp_backend.mcp.server import create_app
from mcp_backend.observability import tool_runs
from tests.unit.endpoint_fakes import SETTINGS, EveryoneIsAlice, RoomyRateTable, ServedInProcess


class SlowKinesis:
    """PutRecords that blocks until the test releases it, and remembers what it was given."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.calls_started = threading.Event()
        self.records: list[dict[str, Any]] = []

    def put_records(self, StreamName: str, Records: list[dict[str, Any]]) -> dict[str, Any]:
        self.calls_started.set()
        self.release.wait(10)
        self.records.extend(Records)
        return {"FailedRecordCount": 0, "Records": [{"SequenceNumber": "1", "ShardId": "s"} for _ in Records]}


def test_a_tool_call_is_answered_before_its_call_log_record_is_put_and_shutdown_flushes_it(capfd, monkeypatch):
    # Given the endpoint over a Kinesis stream that does not answer until released, its tool-run metrics written
    # once a minute
    monkeypatch.setattr(tool_runs, "interval_seconds", 60)
    tool_runs.flush()  # (runs earlier tests in this process left pending)
    capfd.readouterr()
    kinesis = SlowKinesis()
    rates = RoomyRateTable()
    app = create_app(
        SETTINGS,
        authenticator=EveryoneIsAlice(),
        client_factory=lambda service: kinesis if service == "kinesis" else rates,
    )
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "no_such_tool", "arguments": {}}}
    headers = {
        "accept": "application/json, text/event-stream",
        "content-type": "application/json",
        "authorization": "Bearer key",
    }

    async def scenario() -> tuple[int, bool, list[str], list[str]]:
        served = ServedInProcess(app)
        async with served as client:
            # When a tool is called
            response = await client.post("/mcp", json=body, headers=headers)
            # (the record may or may not have reached the stream's thread yet; it is not put until released)
            put_before_answer = bool(kinesis.records)
            metrics_with_answer = tool_metric_blobs(capfd)
            # And the server shuts down while the put is released
            kinesis.release.set()
        return response.status_code, put_before_answer, metrics_with_answer, served.sent

    status, put_before_answer, metrics_with_answer, sent = anyio.run(scenario)

    # Then the call was answered with nothing put yet, and the record was put before the shutdown completed
    assert status == 200
    assert not put_before_answer
    assert sent[-1] == "lifespan.shutdown.complete"
    assert len(kinesis.records) == 1
    # And its tool-run metrics were not written with the answer, but before the shutdown completed
    assert metrics_with_answer == []
    assert [blob["ToolInvocation"] for blob in tool_metric_blobs(capfd)] == [[1.0]]


def tool_metric_blobs(capfd) -> list[dict[str, Any]]:
    lines = capfd.readouterr().out.splitlines()
    return [
        blob for blob in (json.loads(line) for line in lines if line.startswith('{"_aws"')) if "ToolInvocation" in blob
    ]
