"""The Lambda Runtime API (2018-06-01) for one execution environment, served on loopback.

The runtime inside the sandbox (AWS's Runtime Interface Client, awslambdaric) finds it through
AWS_LAMBDA_RUNTIME_API and drives it exactly as on Lambda:
https://docs.aws.amazon.com/lambda/latest/dg/runtimes-api.html
- GET  /2018-06-01/runtime/invocation/next          blocks until an invocation, with its request id,
                                                    deadline, function ARN and trace header;
- POST /2018-06-01/runtime/invocation/{id}/response the result;
- POST /2018-06-01/runtime/invocation/{id}/error    an unhandled error (Lambda-Runtime-Function-Error-Type);
- POST /2018-06-01/runtime/init/error               an init failure (e.g. Runtime.ImportModuleError).
The same address serves the Extensions and Telemetry APIs (devstack.runtime.extensions_api).
"""

from __future__ import annotations

import json
import queue
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from devstack.runtime.extensions_api import ApiError, ExtensionsApi

_PREFIX = "/2018-06-01/runtime"
_RESULT_PATH = re.compile(rf"^{_PREFIX}/invocation/(?P<id>[^/]+)/(?P<kind>response|error)$")
_EXTENSION = "/2020-01-01/extension"
_TELEMETRY = "/2022-07-01/telemetry"


@dataclass
class Invocation:
    payload: bytes
    function_arn: str
    deadline: float  # epoch seconds
    request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    trace_id: str = field(default_factory=lambda: trace_header())
    finished: threading.Event = field(default_factory=threading.Event)
    response: bytes | None = None
    error: dict[str, Any] | None = None  # the runtime's error document


@dataclass
class InitError:
    error_type: str
    document: dict[str, Any]


class RuntimeApi:
    """One environment's Runtime API: hands out one invocation at a time and collects its outcome."""

    def __init__(self, extensions: ExtensionsApi, host: str = "127.0.0.1") -> None:
        self.extensions = extensions
        self._pending: queue.Queue[Invocation | None] = queue.Queue()
        self._invocations: dict[str, Invocation] = {}
        self._lock = threading.Lock()
        self.polling = threading.Event()  # the runtime finished init and asked for work
        self.waiting = threading.Event()  # the runtime is blocked in invocation/next now
        self.init_error: InitError | None = None
        self.init_failed = threading.Event()
        api = self

        class Handler(_Handler):
            runtime_api = api

        self._server = ThreadingHTTPServer((host, 0), Handler)
        self._server.daemon_threads = True
        self.address = f"{host}:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, name=f"runtime-api-{self.address}")
        self._thread.daemon = True
        self._thread.start()

    def submit(self, invocation: Invocation) -> None:
        with self._lock:
            self._invocations[invocation.request_id] = invocation
        self._pending.put(invocation)

    def close(self) -> None:
        self._pending.put(None)  # releases a runtime blocked in invocation/next
        self.extensions.close()
        self._server.shutdown()
        self._server.server_close()

    # ------------------------------------------------------------------ called by the handler
    def next_invocation(self) -> Invocation | None:
        self.polling.set()
        self.waiting.set()
        invocation = self._pending.get()
        self.waiting.clear()
        return invocation

    def finish(self, request_id: str, kind: str, body: bytes, error_type: str | None) -> bool:
        with self._lock:
            invocation = self._invocations.pop(request_id, None)
        if invocation is None:
            return False
        if kind == "response":
            invocation.response = body
        else:
            invocation.error = _error_document(body, error_type)
        invocation.finished.set()
        return True

    def fail_init(self, body: bytes, error_type: str | None) -> None:
        document = _error_document(body, error_type)
        self.init_error = InitError(document.get("errorType", error_type or "Runtime.Unknown"), document)
        self.init_failed.set()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out in separate writes: without TCP_NODELAY, Nagle and the client's delayed
    # ACK hold each answer ~40 ms.
    disable_nagle_algorithm = True
    runtime_api: RuntimeApi

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the runtime's own output is what the developer reads

    def do_GET(self) -> None:
        if self.path.rstrip("/") == f"{_EXTENSION}/event/next":
            self._extension_call(self._next_event)
            return
        if self.path != f"{_PREFIX}/invocation/next":
            self._reply(404, {"errorMessage": f"{self.path} is not a Runtime API path"})
            return
        invocation = self.runtime_api.next_invocation()
        if invocation is None:  # the environment is shutting down
            self._reply(500, {"errorMessage": "environment shutting down"})
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(invocation.payload)))
        self.send_header("Lambda-Runtime-Aws-Request-Id", invocation.request_id)
        self.send_header("Lambda-Runtime-Deadline-Ms", str(int(invocation.deadline * 1000)))
        self.send_header("Lambda-Runtime-Invoked-Function-Arn", invocation.function_arn)
        self.send_header("Lambda-Runtime-Trace-Id", invocation.trace_id)
        self.end_headers()
        self.wfile.write(invocation.payload)

    def do_PUT(self) -> None:
        body = self._body()
        if self.path.rstrip("/") != _TELEMETRY:
            self._reply(404, {"errorMessage": f"{self.path} is not a Telemetry API path"})
            return
        self._extension_call(lambda: self._subscribe(body))

    def do_POST(self) -> None:
        body = self._body()
        if self.path.startswith(_EXTENSION):
            self._extension_call(lambda: self._extension_post(body))
            return
        error_type = self.headers.get("Lambda-Runtime-Function-Error-Type")
        if self.path == f"{_PREFIX}/init/error":
            self.runtime_api.fail_init(body, error_type)
            self._reply(202, {"status": "OK"})
            return
        match = _RESULT_PATH.match(self.path)
        if match is None:
            self._reply(404, {"errorMessage": f"{self.path} is not a Runtime API path"})
            return
        if not self.runtime_api.finish(match.group("id"), match.group("kind"), body, error_type):
            self._reply(400, {"errorMessage": "Invalid request ID", "errorType": "InvalidRequestID"})
            return
        self._reply(202, {"status": "OK"})

    # ------------------------------------------------------------------ Extensions and Telemetry APIs
    def _extension_call(self, call: Any) -> None:
        try:
            call()
        except ApiError as error:
            self._reply(error.status, {"errorType": error.error_type, "errorMessage": error.message})

    def _next_event(self) -> None:
        event = self.runtime_api.extensions.next_event(self.headers.get("Lambda-Extension-Identifier"))
        if event is None:  # the environment is gone
            self._reply(500, {"errorType": "Extension.Shutdown", "errorMessage": "environment shut down"})
            return
        self._reply(200, event, {"Lambda-Extension-Event-Identifier": str(uuid.uuid4())})

    def _extension_post(self, body: bytes) -> None:
        extensions = self.runtime_api.extensions
        path = self.path.rstrip("/")
        if path == f"{_EXTENSION}/register":
            extension_id, answer = extensions.register(self.headers.get("Lambda-Extension-Name"), body)
            self._reply(200, answer, {"Lambda-Extension-Identifier": extension_id})
        elif path in (f"{_EXTENSION}/init/error", f"{_EXTENSION}/exit/error"):
            extensions.fail(
                self.headers.get("Lambda-Extension-Identifier"),
                body,
                self.headers.get("Lambda-Extension-Function-Error-Type"),
            )
            self._reply(202, {"status": "OK"})
        else:
            self._reply(404, {"errorMessage": f"{self.path} is not an Extensions API path"})

    def _subscribe(self, body: bytes) -> None:
        self.runtime_api.extensions.subscribe(self.headers.get("Lambda-Extension-Identifier"), body)
        self._reply(200, "OK")

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _reply(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the runtime is gone (its environment was ended)


def _error_document(body: bytes, error_type: str | None) -> dict[str, Any]:
    try:
        document = json.loads(body or b"{}")
    except ValueError:
        document = {"errorMessage": body.decode(errors="replace")}
    if not isinstance(document, dict):
        document = {"errorMessage": str(document)}
    if error_type and "errorType" not in document:
        document["errorType"] = error_type
    return document


def trace_header() -> str:
    """An X-Ray trace header for the invocation, not sampled: nothing is sent to a daemon."""
    return f"Root=1-{int(time.time()):08x}-{uuid.uuid4().hex[:24]};Parent={uuid.uuid4().hex[:16]};Sampled=0"
