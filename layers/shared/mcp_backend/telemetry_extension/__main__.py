"""The extension's process: register for INVOKE and SHUTDOWN, subscribe a loopback listener to platform
telemetry, ship each platform.report as a call-log record, flush at SHUTDOWN. It never fails an
invocation: without a stream it registers and idles; telemetry it cannot read is counted and skipped."""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from mcp_backend.aws import new_client
from mcp_backend.calllog.writer import CallLogWriter
from mcp_backend.telemetry_extension.api import ExtensionsClient
from mcp_backend.telemetry_extension.reports import ReportFolder
from mcp_backend.telemetry_extension.shipper import RecordShipper

NAME = "call-log-telemetry"
SHUTDOWN_BUDGET_SECONDS = 1.5  # of the 2 s Lambda gives external extensions after SHUTDOWN
SANDBOX_HOST = "sandbox.localdomain"


def listener_address() -> str:
    """Where Lambda can reach the listener: the sandbox's own name, as the Telemetry API documents."""
    try:
        return socket.gethostbyname(SANDBOX_HOST)
    except OSError:
        return "127.0.0.1"


def serve_telemetry(folder: ReportFolder, shipper: RecordShipper) -> ThreadingHTTPServer:
    class Listener(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            try:
                events = json.loads(body)
            except ValueError:
                events = None
            shipper.add(folder.fold(events))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer((listener_address(), 0), Listener)
    threading.Thread(target=server.serve_forever, name="telemetry-listener", daemon=True).start()
    return server


def main() -> int:
    client = ExtensionsClient(os.environ["AWS_LAMBDA_RUNTIME_API"], NAME)
    stream = os.environ.get("CALL_LOG_STREAM_NAME", "")
    enabled = bool(stream) and os.environ.get("CALL_LOG_TELEMETRY", "enabled") == "enabled"
    client.register(["INVOKE", "SHUTDOWN"] if enabled else ["SHUTDOWN"])
    shipper = None
    if enabled:
        folder = ReportFolder(os.environ.get("AWS_LAMBDA_FUNCTION_NAME", "unknown"))
        # Short timeouts and one SDK attempt per call (the writer retries): a stalled stream costs records,
        # and SHUTDOWN's budget is not spent waiting on it.
        kinesis = new_client("kinesis", connect_timeout=1, read_timeout=2, max_attempts=1)
        shipper = RecordShipper(CallLogWriter(stream, kinesis, max_attempts=2))
        server = serve_telemetry(folder, shipper)
        client.subscribe(f"http://{SANDBOX_HOST}:{server.server_address[1]}", ["platform"])
    while True:
        event = client.next_event()
        if event.get("eventType") == "SHUTDOWN":
            if shipper is not None:
                shipper.close(SHUTDOWN_BUDGET_SECONDS)
            return 0


if __name__ == "__main__":
    sys.exit(main())
