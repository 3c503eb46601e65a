"""External extensions in the Lambda runtime: started from the layer's /opt/extensions beside the
runtime, driven through the Extensions API (register, INVOKE, SHUTDOWN) and fed by the Telemetry API
(platform events batched to the extension's listener on sandbox.localdomain), as on Lambda."""

from __future__ import annotations

import io
import json
import os
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from devstack.runtime import execution_environment
from devstack.runtime.execution_environment import LambdaFunction
from devstack.runtime.function_errors import FunctionError
from devstack.runtime.lambda_runtime import LambdaRuntime
from devstack.runtime.runtime_image import LambdaRuntimeUnavailable, prepare_runtime_image
from devstack.stack.resources import FunctionSpec
from tests.e2e.conftest import process_states, wait_until

pytestmark = pytest.mark.e2e

PROBES = Path(__file__).parent / "lambda_functions"
EXTENSION_LAYER = Path(__file__).parent / "lambda_layers" / "probe-extension"


class Recorder:
    """A loopback server collecting what the probe extension reports."""

    def __init__(self) -> None:
        self.entries: list[dict] = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                recorder.entries.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"

    def of(self, kind: str) -> list:
        return [entry["payload"] for entry in self.entries if entry["kind"] == kind]

    def telemetry(self, event_type: str) -> list[dict]:
        return [event for batch in self.of("telemetry") for event in batch if event["type"] == event_type]


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    recorder = Recorder()
    yield recorder
    recorder.server.shutdown()


@pytest.fixture
def with_extension(recorder):
    try:
        image = prepare_runtime_image()
    except LambdaRuntimeUnavailable as missing:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"the Lambda runtime is unavailable here: {missing}")
    if not image.namespaces:
        pytest.skip("external extensions need the sandbox's /opt (user namespaces)")
    runtimes = []

    def start(handler: str = "probe.identity", timeout: int = 10, **environment: str) -> LambdaRuntime:
        variables = {"PROBE_RECORDER_URL": recorder.url, **environment}
        spec = FunctionSpec("Probe", "local-Probe", "arn:aws:lambda:us-east-1:123456789012:function:local-Probe",
                            handler, PROBES, (), timeout, 256, variables)  # fmt: skip
        function = LambdaFunction(spec, PROBES, (EXTENSION_LAYER,), 1, "us-east-1", variables)
        runtime = LambdaRuntime({"Probe": function}, image, io.StringIO())
        runtimes.append(runtime)
        return runtime

    yield start
    for runtime in runtimes:
        runtime.shutdown()


def test_an_extension_registers_gets_each_invoke_and_shutdown_and_the_platform_telemetry(with_extension, recorder):
    # Given a function whose layer ships an external extension
    runtime = with_extension()

    # When it is invoked twice and its environment is then shut down
    runtime.invoke("Probe", {})
    runtime.invoke("Probe", {})
    runtime.shutdown()

    # Then the extension registered and subscribed, saw two INVOKEs and one SHUTDOWN (spindown) ...
    [registration] = recorder.of("register")
    assert registration == {
        "status": 200,
        "answer": {"functionName": "local-Probe", "functionVersion": "$LATEST", "handler": "probe.identity"},
    }
    assert recorder.of("subscribe") == [{"status": 200, "answer": "OK"}]
    events = recorder.of("event")
    invokes = [event for event in events if event["eventType"] == "INVOKE"]
    assert len(invokes) == 2 and all(e["invokedFunctionArn"].endswith(":local-Probe") for e in invokes)
    assert [e["shutdownReason"] for e in events if e["eventType"] == "SHUTDOWN"] == ["spindown"]
    # ... and the platform events of init (sent before it subscribed) and of both invocations
    assert [e["record"]["status"] for e in recorder.telemetry("platform.initRuntimeDone")] == ["success"]
    assert len(recorder.telemetry("platform.initStart")) == 1
    reports = recorder.telemetry("platform.report")
    assert [r["record"]["requestId"] for r in reports] == [e["requestId"] for e in invokes]
    assert [r["record"]["status"] for r in recorder.telemetry("platform.runtimeDone")] == ["success", "success"]
    metrics = reports[0]["record"]["metrics"]
    assert {"durationMs", "billedDurationMs", "memorySizeMB", "maxMemoryUsedMB", "initDurationMs"} <= set(metrics)
    assert "initDurationMs" not in reports[1]["record"]["metrics"]


def test_a_timeout_reaches_the_extension_as_runtime_done_timeout_then_shutdown_timeout(with_extension, recorder):
    # Given a function with an extension and a 1 s timeout
    runtime = with_extension(timeout=1)

    # When an invocation runs past its timeout
    with pytest.raises(FunctionError):
        runtime.invoke("Probe", {"seconds": 30})
    runtime.shutdown()

    # Then the extension's telemetry says so, and its SHUTDOWN carries the reason
    assert [e["record"]["status"] for e in recorder.telemetry("platform.runtimeDone")] == ["timeout"]
    assert [e["record"]["status"] for e in recorder.telemetry("platform.report")] == ["timeout"]
    assert [e["shutdownReason"] for e in recorder.of("event") if e["eventType"] == "SHUTDOWN"] == ["timeout"]


def test_a_subscription_outside_the_documented_buffering_limits_is_refused(with_extension, recorder):
    # Given an extension asking to buffer fewer items than the Telemetry API's minimum of 1000
    runtime = with_extension(PROBE_BUFFERING=json.dumps({"maxItems": 10, "maxBytes": 262144, "timeoutMs": 25}))

    # When the function initializes and runs
    runtime.invoke("Probe", {})

    # Then the subscription was answered 400 with the field named, and the function still ran
    [subscription] = recorder.of("subscribe")
    assert subscription["status"] == 400 and "maxItems" in subscription["answer"]["errorMessage"]


def test_an_idle_environment_is_frozen_thawed_for_its_next_invocation_and_still_shut_down(
    with_extension, recorder, monkeypatch
):
    # Given a function whose layer ships an external extension, frozen soon after it goes idle
    monkeypatch.setattr(execution_environment, "FREEZE_AFTER_SECONDS", 0.1)
    runtime = with_extension()
    first = runtime.invoke("Probe", {})
    [env] = runtime.pool("Probe").environments()

    # When it is left idle: then the runtime and the extension (its whole process group) are stopped
    assert wait_until(lambda: set(process_states(env)) == {"T"}), process_states(env)
    assert len(process_states(env)) >= 2  # the runtime and the extension

    # When it is invoked again: then the same environment is thawed and answers
    assert runtime.invoke("Probe", {}) == first
    assert runtime.pool("Probe").environments() == [env]

    # When it is frozen again and the runtime shuts down: then the extension still gets its SHUTDOWN
    assert wait_until(lambda: set(process_states(env)) == {"T"}), process_states(env)
    runtime.shutdown()
    assert [e["shutdownReason"] for e in recorder.of("event") if e["eventType"] == "SHUTDOWN"] == ["spindown"]
    assert process_states(env) == []
    # and the platform reports of both invocations reached it (flushed before each freeze)
    assert len(recorder.telemetry("platform.report")) == 2
