"""The extension's process: register for INVOKE and SHUTDOWN, subscribe a loopback listener to platform
telemetry, ship each platform.report as a call-log record, flush at SHUTDOWN. It never fails an
invocation: without a stream it registers and idles; telemetry it cannot read is counted and skipped.

Lambda's init waits until every extension asks for its first event, so this module imports only the
standard library: the call-log code (pydantic, Powertools, boto3) loads on the pipeline thread while
the extension already waits, and deliveries that arrive before it is ready wait in the inbox."""

from __future__ import annotations

import json
import os
import queue
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from mcp_backend.telemetry_extension.api import ExtensionsClient

NAME = "call-log-telemetry"
SHUTDOWN_BUDGET_SECONDS = 1.5  # of the 2 s Lambda gives external extensions after SHUTDOWN
SANDBOX_HOST = "sandbox.localdomain"
_CLOSE = object()


def listener_address() -> str:
    """Where Lambda can reach the listener: the sandbox's own name, as the Telemetry API documents."""
    try:
        return socket.gethostbyname(SANDBOX_HOST)
    except OSError:
        return "127.0.0.1"


def serve_telemetry(inbox: queue.Queue[Any]) -> ThreadingHTTPServer:
    class Listener(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            try:
                inbox.put(json.loads(body))
            except ValueError:
                inbox.put(None)  # counted as malformed by the pipeline
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer((listener_address(), 0), Listener)
    threading.Thread(target=server.serve_forever, name="telemetry-listener", daemon=True).start()
    return server


def run_pipeline(inbox: queue.Queue[Any], function_name: str, stream: str) -> None:
    """Fold deliveries into records and ship them until the inbox is closed, then flush."""
    # Loaded here, off the init path (see the module docstring), not to break an import cycle.
    from mcp_backend.aws import new_client
    from mcp_backend.calllog.shipper import RecordShipper
    from mcp_backend.calllog.writer import CallLogWriter
    from mcp_backend.telemetry_extension.reports import ReportFolder

    folder = ReportFolder(function_name)
    # Short timeouts and one SDK attempt per call (the writer retries): a stalled stream costs records,
    # and SHUTDOWN's budget is not spent waiting on it.
    kinesis = new_client("kinesis", connect_timeout=1, read_timeout=2, max_attempts=1)
    shipper = RecordShipper(CallLogWriter(stream, kinesis, max_attempts=2))
    while (delivery := inbox.get()) is not _CLOSE:
        shipper.add(folder.fold(delivery))
    shipper.close(SHUTDOWN_BUDGET_SECONDS)


def main() -> int:
    client = ExtensionsClient(os.environ["AWS_LAMBDA_RUNTIME_API"], NAME)
    stream = os.environ.get("CALL_LOG_STREAM_NAME", "")
    enabled = bool(stream) and os.environ.get("CALL_LOG_TELEMETRY", "enabled") == "enabled"
    client.register(["INVOKE", "SHUTDOWN"] if enabled else ["SHUTDOWN"])
    pipeline = None
    inbox: queue.Queue[Any] = queue.Queue()
    if enabled:
        function_name = os.environ.get("AWS_LAMBDA_FUNCTION_NAME", "unknown")
        pipeline = threading.Thread(target=run_pipeline, args=(inbox, function_name, stream), name="pipeline")
        pipeline.start()
        server = serve_telemetry(inbox)
        client.subscribe(f"http://{SANDBOX_HOST}:{server.server_address[1]}", ["platform"])
    while True:
        event = client.next_event()
        if event.get("eventType") == "SHUTDOWN":
            if pipeline is not None:
                inbox.put(_CLOSE)
                pipeline.join(SHUTDOWN_BUDGET_SECONDS + 0.3)
            return 0


if __name__ == "__main__":
    sys.exit(main())
