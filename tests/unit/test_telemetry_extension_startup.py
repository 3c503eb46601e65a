"""The call-log-telemetry extension started as Lambda starts it (its own process, `python -m`), against a
stand-in for the Extensions and Telemetry APIs on loopback: its start uses the standard library only, and the
call-log code (pydantic, Powertools, boto3) loads only once a delivery brings records to ship."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# What the call-log code brings; none of it may load before the first records.
HEAVY = {"boto3", "botocore", "pydantic", "aws_lambda_powertools", "mcp_backend.calllog", "mcp_backend.aws"}
# Standard-library packages its start does without, each costing Lambda's init more than the extension's own
# work: the HTTP client and server (and the email, ssl and urllib packages they import), typing, and the idna
# codec (with unicodedata) that name lookups through getaddrinfo or gethostbyname import.
SLOW_TO_IMPORT = {"http", "email", "ssl", "urllib", "typing", "encodings.idna", "unicodedata"}


class StandInLambda:
    """Hands out `events` to event/next in order; once it has handed out an INVOKE, it POSTs that invocation's
    runtimeDone and report to the subscribed listener, as the Telemetry API does after the runtime answers."""

    def __init__(self, events: list[dict]) -> None:
        self.events = list(events)
        self.registered: list[str] = []
        self.listener = ""
        self.delivered = threading.Event()
        self.asked_after_delivery: list[bool] = []
        stand_in = self

        class Api(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                stand_in.registered = body["events"]
                self._answer({}, {"Lambda-Extension-Identifier": "ext-1"})

            def do_PUT(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                port = urllib.parse.urlsplit(body["destination"]["URI"]).port
                stand_in.listener = f"http://127.0.0.1:{port}/"  # sandbox.localdomain is this host
                self._answer(None)

            def do_GET(self) -> None:
                stand_in.asked_after_delivery.append(stand_in.delivered.is_set())
                event = stand_in.events.pop(0)
                self._answer(event)
                if event["eventType"] == "INVOKE":
                    threading.Thread(target=stand_in.deliver, args=(event["requestId"],), daemon=True).start()

            def _answer(self, body: object, headers: dict[str, str] | None = None) -> None:
                raw = b"" if body is None else json.dumps(body).encode()
                self.send_response(200)
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Api)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.address = f"127.0.0.1:{self.server.server_address[1]}"

    def deliver(self, request_id: str) -> None:
        time.sleep(0.1)  # the Telemetry API's buffering
        metrics = {"durationMs": 3.0, "billedDurationMs": 3, "memorySizeMB": 512, "maxMemoryUsedMB": 60}
        # A pinned stamp is safe: the extension carries an event's time into the call log as data only.
        events = [
            {"time": "2026-11-30T12:00:00.000Z", "type": "platform.runtimeDone",
             "record": {"requestId": request_id, "status": "success"}},
            {"time": "2026-11-30T12:00:00.000Z", "type": "platform.report",
             "record": {"requestId": request_id, "metrics": metrics}},
        ]  # fmt: skip
        request = urllib.request.Request(self.listener, data=json.dumps(events).encode(), method="POST")
        with urllib.request.urlopen(request, timeout=10):
            self.delivered.set()


def refused_port() -> int:
    """A loopback port where nothing listens: the call log's Kinesis endpoint, which refuses at once."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def run_extension() -> Iterator:
    servers = []

    def run(events: list[dict]) -> tuple[StandInLambda, subprocess.CompletedProcess[str], set[str]]:
        stand_in = StandInLambda(events)
        servers.append(stand_in.server)
        environment = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "PYTHONPATH": str(ROOT / "layers" / "shared"),
            "AWS_LAMBDA_RUNTIME_API": stand_in.address,
            "AWS_LAMBDA_FUNCTION_NAME": "fn",
            "CALL_LOG_STREAM_NAME": "calls",
            "AWS_REGION": "us-east-1",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": "test",
            "AWS_SECRET_ACCESS_KEY": "test",
            "AWS_EC2_METADATA_DISABLED": "true",
            "AWS_ENDPOINT_URL_KINESIS": f"http://127.0.0.1:{refused_port()}",
        }
        finished = subprocess.run(
            [sys.executable, "-X", "importtime", "-m", "mcp_backend.telemetry_extension"],
            env=environment,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        imported = {
            line.rsplit("|", 1)[1].strip() for line in finished.stderr.splitlines() if line.startswith("import time:")
        }
        return stand_in, finished, imported

    yield run
    for server in servers:
        server.shutdown()


def far_deadline() -> int:
    return int(time.time() * 1000) + 600_000


def loaded(imported: set[str], packages: set[str] = HEAVY) -> set[str]:
    return {name for name in imported if any(name == p or name.startswith(f"{p}.") for p in packages)}


def test_its_start_registers_and_subscribes_with_a_few_standard_library_modules(run_extension):
    # Given an environment that shuts down before any invocation
    shutdown = {"eventType": "SHUTDOWN", "shutdownReason": "spindown", "deadlineMs": far_deadline()}

    # When the extension starts, registers, subscribes and waits for its first event
    stand_in, finished, imported = run_extension([shutdown])

    # Then it registered and subscribed, and loaded none of the call-log code (no boto3, botocore, pydantic) and
    # none of the slow standard-library packages
    assert finished.returncode == 0, finished.stderr[-2000:]
    assert stand_in.registered == ["INVOKE", "SHUTDOWN"] and stand_in.listener
    assert "mcp_backend.telemetry_extension.api" in imported  # the import trace covers its modules
    assert loaded(imported) == set()
    assert loaded(imported, SLOW_TO_IMPORT) == set()


def test_the_call_log_code_loads_with_the_first_records_before_the_next_event_is_asked_for(run_extension):
    # Given one invocation, whose runtimeDone and report the Telemetry API delivers after it, then SHUTDOWN
    events = [
        {"eventType": "INVOKE", "requestId": "r-1", "deadlineMs": far_deadline()},
        {"eventType": "SHUTDOWN", "shutdownReason": "spindown", "deadlineMs": far_deadline()},
    ]

    # When the extension runs through them
    stand_in, finished, imported = run_extension(events)

    # Then the call-log code loaded (boto3 included), the event after the INVOKE was asked for only after the
    # delivery, and the report was shipped (here to a Kinesis endpoint that refuses, so counted as dropped)
    assert finished.returncode == 0, finished.stderr[-2000:]
    assert {"boto3", "botocore.session", "pydantic", "mcp_backend.calllog.writer"} <= loaded(imported)
    assert stand_in.asked_after_delivery == [False, True]
    assert "call-log-telemetry: 0 records written, 1 dropped" in finished.stderr
