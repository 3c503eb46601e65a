"""One execution environment: a sandboxed process tree (the runtime and its external extensions) started with
Lambda's variables, supervised through init, invocations, freeze and thaw and shutdown, and what the platform
tells its extensions and logs about each invocation (START, END, REPORT; platform.* events).
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from devstack.runtime import leases, procfs
from devstack.runtime.build_output import external_extensions
from devstack.runtime.extensions_api import SANDBOX_HOST, ExtensionsApi
from devstack.runtime.function_errors import FunctionError
from devstack.runtime.interpreter import RUNTIME_VERSION
from devstack.runtime.invocation_records import Report, telemetry_status, timeout_document
from devstack.runtime.runtime_api import Invocation, RuntimeApi
from devstack.runtime.runtime_image import RuntimeImage
from devstack.runtime.sandbox import (
    RUNTIME_DIR,
    TASK_ROOT,
    SandboxLayout,
    emulated_paths,
    opt_dir,
    sandbox_command,
)
from devstack.stack.resources import FunctionSpec

log = logging.getLogger("devstack.lambda")


# Lambda's values for the Python runtimes: configuration-envvars.html lists PATH and LD_LIBRARY_PATH (its
# older copies omit /var/lang, which the python3.11+ runtimes put first; that part is from the runtime
# images, not from a page found here).
LAMBDA_PATH = "/var/lang/bin:/usr/local/bin:/usr/bin/:/bin:/opt/bin"
LAMBDA_LD_LIBRARY_PATH = (
    "/var/lang/lib:/lib64:/usr/lib64:/var/runtime:/var/runtime/lib:/var/task:/var/task/lib:/opt/lib"
)
# The Shutdown phase's limit: 2,000 ms. With external extensions registered, Lambda sends the runtime SIGTERM and
# gives it up to 300 ms, then SIGKILL; the rest goes to the extensions' SHUTDOWN
# (https://github.com/aws-samples/graceful-shutdown-with-aws-lambda; runtimes-extensions-api.html, Shutdown phase).
SHUTDOWN_GRACE_SECONDS = 2.0
RUNTIME_SHUTDOWN_SECONDS = 0.3
# How long an environment stays idle (back in its pool, the runtime and every extension waiting for their
# next event) before it is frozen. Lambda freezes at once; the grace lets what an extension does after
# an invocation (the call-log extension ships a platform.report within about a second) finish while the
# stack is in use, which on Lambda resumes at the next thaw, and spares back-to-back invocations a
# freeze and thaw each.
FREEZE_AFTER_SECONDS = 2.0
# The sandbox's first process: every external extension in the background, then the runtime in its place.
_START_EXTENSIONS_THEN_RUNTIME = (
    'for extension in /opt/extensions/*; do [ -f "$extension" ] && [ -x "$extension" ] && "$extension" & done; '
    "exec /var/runtime/bootstrap"
)  # on-demand init; past it Lambda re-runs init within the invocation's timeout


@dataclass(frozen=True)
class LambdaFunction:
    spec: FunctionSpec
    task_dir: Path
    layer_dirs: tuple[Path, ...]
    concurrency: int
    region: str
    environment: dict[str, str]  # template Environment + the local stack's additions
    ephemeral_storage_mb: int = 512

    @property
    def exec_wrapper(self) -> str | None:
        return self.environment.get("AWS_LAMBDA_EXEC_WRAPPER")


class ExecutionEnvironment:
    """One sandboxed process tree serving one invocation at a time."""

    def __init__(
        self, function: LambdaFunction, image: RuntimeImage, output: TextIO, cpus: frozenset[int] | None = None
    ) -> None:
        self.function = function
        self.image = image
        # Benchmarks only: the CPUs every process and thread of the environment may run on (see start).
        self.cpus = cpus
        self.id = uuid.uuid4().hex[:8]
        self.output = output
        self.extensions = ExtensionsApi(function.spec.name, "$LATEST", function.spec.handler)
        self.api = RuntimeApi(self.extensions)
        # External extensions start beside the runtime; init ends when each has registered and waits.
        self.expected_extensions = len(external_extensions(function.layer_dirs)) if image.namespaces else 0
        self.shutdown_reason = "spindown"
        self.port = _free_port() if function.exec_wrapper else None
        self.started_at = 0.0
        self.init_duration_ms: float | None = None  # set once initialized; reported on the first REPORT
        self.restore_duration_ms: float | None = None  # SnapStart behind the Web Adapter: its restore hooks' time
        self.cold = True
        self.process: subprocess.Popen[bytes] | None = None
        self._root: Path | None = None
        self._output_done = threading.Event()
        self._stopped = False
        self._freeze_lock = threading.Lock()
        self._parked = False  # in its pool, waiting for an invocation
        self._freeze_timer: threading.Timer | None = None
        self.frozen = False

    @property
    def prefix(self) -> str:
        return f"[{self.function.spec.logical_id}/{self.id}] "

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        environment = self.variables()
        if self.image.namespaces:
            self._root = Path(tempfile.mkdtemp(prefix="lambda-sandbox-"))
            layout = SandboxLayout(
                task_dir=self.function.task_dir,
                layer_dirs=self.function.layer_dirs,
                runtime_dir=self.image.runtime_dir,
                interpreter_prefix=self.image.prefix,
                provided_packages=self.image.provided_packages,
                python_version=RUNTIME_VERSION,
                tmp_megabytes=self.function.ephemeral_storage_mb,
                hosts_file=self._hosts_file(),
            )
            command = sandbox_command(
                layout, self._root, ["/bin/sh", "-c", _START_EXTENSIONS_THEN_RUNTIME], environment
            )
            cwd = None
        else:
            command, cwd = self._emulated_command(environment)
        if self.cpus:
            # Set on the first process before it runs anything: the runtime, its extensions and every thread
            # they start inherit it (sched_setaffinity(2)); taskset execs the command in its own place.
            command = [shutil.which("taskset") or "taskset", "--cpu-list", _cpu_list(self.cpus), *command]
        self.started_at = time.monotonic()
        self.extensions.emit(
            "platform.initStart",
            {"initializationType": "on-demand", "phase": "init", "runtimeVersion": f"python:{RUNTIME_VERSION}"},
        )
        self.process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=None if self.image.namespaces else environment,
            start_new_session=True,  # one process group: a timeout kills everything the function started
        )
        leases.take(self.process.pid, self._root)
        threading.Thread(target=self._pump_output, name=f"output-{self.id}", daemon=True).start()

    def variables(self) -> dict[str, str]:
        """Exactly what the Lambda Python runtime sets, then the function's own Environment."""
        spec = self.function.spec
        day = dt.datetime.now(dt.UTC).strftime("%Y/%m/%d")
        variables = {
            "_HANDLER": spec.handler,
            "AWS_EXECUTION_ENV": f"AWS_Lambda_python{RUNTIME_VERSION}",
            "AWS_LAMBDA_FUNCTION_NAME": spec.name,
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(spec.memory_size),
            "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
            "AWS_LAMBDA_INITIALIZATION_TYPE": "snap-start" if spec.snap_start else "on-demand",
            "AWS_LAMBDA_LOG_GROUP_NAME": f"/aws/lambda/{spec.name}",
            "AWS_LAMBDA_LOG_STREAM_NAME": f"{day}/[$LATEST]{self.id}",
            "AWS_REGION": self.function.region,
            "AWS_DEFAULT_REGION": self.function.region,
            "AWS_LAMBDA_RUNTIME_API": self.api.address,
            "LAMBDA_TASK_ROOT": TASK_ROOT,
            "LAMBDA_RUNTIME_DIR": RUNTIME_DIR,
            "PATH": LAMBDA_PATH,
            "LD_LIBRARY_PATH": LAMBDA_LD_LIBRARY_PATH,
            "PYTHONPATH": RUNTIME_DIR,
            "LANG": "en_US.UTF-8",
            "TZ": ":UTC",
            # Tracing: Active adds these; the daemon address is loopback here (traces are not sampled).
            "AWS_XRAY_CONTEXT_MISSING": "LOG_ERROR",
            "AWS_XRAY_DAEMON_ADDRESS": "127.0.0.1:2000",
            # Credentials of the execution role: moto accepts any.
            "AWS_ACCESS_KEY_ID": "local",
            "AWS_SECRET_ACCESS_KEY": "local",
            "AWS_SESSION_TOKEN": "local",
            **self.function.environment,
        }
        if self.port is not None:
            # Each Lambda sandbox has its own loopback; here environments share one, so each gets a port.
            variables["PORT"] = variables["AWS_LWA_PORT"] = str(self.port)
            if "AWS_LWA_READINESS_CHECK_PORT" in variables:
                variables["AWS_LWA_READINESS_CHECK_PORT"] = str(self.port)
        return variables

    def _hosts_file(self) -> Path:
        """The sandbox's /etc/hosts: Lambda resolves sandbox.localdomain to the sandbox itself."""
        assert self._root is not None
        hosts = self._root.with_name(self._root.name + "-hosts")
        hosts.write_text(f"127.0.0.1\tlocalhost {SANDBOX_HOST}\n::1\tlocalhost ip6-localhost\n")
        return hosts

    def _emulated_command(self, environment: dict[str, str]) -> tuple[list[str], str]:
        paths = emulated_paths(
            SandboxLayout(
                self.function.task_dir,
                self.function.layer_dirs,
                self.image.runtime_dir,
                self.image.prefix,
                self.image.provided_packages,
                RUNTIME_VERSION,
            )
        )
        for name, value in list(environment.items()):
            for sandbox_path, host_path in paths.items():
                value = value.replace(sandbox_path, host_path)
            environment[name] = value
        opt = opt_dir(self.function.layer_dirs)
        layer_python = [str(opt / "python")] if opt is not None and (opt / "python").is_dir() else []
        environment["PYTHONPATH"] = os.pathsep.join(
            [*layer_python, str(self.image.runtime_dir), str(self.image.provided_packages)]
        )
        environment["PATH"] = f"{self.image.prefix / 'bin'}:{os.environ.get('PATH', '/usr/bin:/bin')}"
        if self.function.exec_wrapper:
            return [str(self.function.task_dir / self.function.spec.handler)], str(self.function.task_dir)
        return [str(self.image.python), str(self.image.runtime_dir / "bootstrap.py")], str(self.function.task_dir)

    def wait_initialized(self, limit: float, ready: Callable[[], bool] | None = None) -> None:
        """Block until the runtime asks for work (or `ready()` holds); an init failure raises FunctionError."""
        try:
            self._wait_initialized(limit, ready)
        except FunctionError:
            self._report_init("error")
            raise
        self._report_init("success")

    def _report_init(self, status: str) -> None:
        duration = (time.monotonic() - self.started_at) * 1000
        record = {"initializationType": "on-demand", "phase": "init"}
        self.extensions.emit("platform.initRuntimeDone", {**record, "status": status})
        self.extensions.emit("platform.initReport", {**record, "status": status, "metrics": {"durationMs": duration}})

    def _wait_initialized(self, limit: float, ready: Callable[[], bool] | None) -> None:
        deadline = self.started_at + limit
        while True:
            if self.api.init_failed.is_set() and self.api.init_error is not None:
                self._wait_exit(2)
                raise FunctionError(self.api.init_error.document)
            if self.extensions.init_error is not None:
                raise FunctionError({**self.extensions.init_error, "errorType": "Extension.InitError"})
            runtime_ready = (ready() if ready is not None else self.api.polling.is_set()) is True
            if runtime_ready and self.extensions.ready(self.expected_extensions):
                self.init_duration_ms = (time.monotonic() - self.started_at) * 1000
                return
            code = self.process.poll() if self.process else None
            if code is not None:
                self._output_done.wait(2)
                raise FunctionError(
                    {
                        "errorType": "Runtime.ExitError",
                        "errorMessage": f"RequestId: init Error: Runtime exited with error: exit status {code}",
                    }
                )
            if time.monotonic() > deadline:
                raise FunctionError(
                    {
                        "errorType": "Sandbox.Timedout",
                        "errorMessage": f"Init timed out after {limit:.2f} seconds"
                        + ("" if ready is None else " (the readiness check never answered)"),
                    }
                )
            self.api.polling.wait(0.01) if ready is None else time.sleep(0.01)

    def invoke(self, payload: bytes, deadline: float, request_id: str) -> bytes:
        """Run one invocation to its end and return its response. Function errors raise FunctionError."""
        invocation = Invocation(
            payload=payload,
            function_arn=self.function.spec.arn,
            deadline=time.time() + (deadline - time.monotonic()),
            request_id=request_id,
        )
        started = self.begin_invocation(request_id, invocation.trace_id, invocation.deadline)
        self.api.submit(invocation)
        try:
            while not invocation.finished.wait(0.02):
                code = self.process.poll() if self.process else None
                if code is not None:
                    self._output_done.wait(2)
                    raise FunctionError(
                        {
                            "errorType": "Runtime.ExitError",
                            "errorMessage": f"RequestId: {invocation.request_id} Error: Runtime exited with error: "
                            f"exit status {code}",
                        }
                    )
                if time.monotonic() > deadline:
                    self.end_runtime()  # the runtime is stopped at once; extensions get SHUTDOWN (timeout)
                    raise FunctionError(timeout_document(invocation.request_id, self.function.spec.timeout))
        except FunctionError as error:
            self.end_invocation(request_id, started, telemetry_status(error), deadline)
            raise
        if invocation.error is not None:
            self.end_invocation(request_id, started, "error", deadline, len(invocation.response or b""))
            raise FunctionError(invocation.error)
        self.end_invocation(request_id, started, "success", deadline, len(invocation.response or b""))
        return invocation.response or b""

    # ------------------------------------------------------------------ what the platform tells extensions
    def begin_invocation(self, request_id: str, trace_id: str, deadline_epoch: float) -> float:
        tracing = {"type": "X-Amzn-Trace-Id", "value": trace_id}
        self.extensions.emit("platform.start", {"requestId": request_id, "version": "$LATEST", "tracing": tracing})
        self.extensions.dispatch(
            {
                "eventType": "INVOKE",
                "deadlineMs": int(deadline_epoch * 1000),
                "requestId": request_id,
                "invokedFunctionArn": self.function.spec.arn,
                "tracing": tracing,
            }
        )
        return time.monotonic()

    def end_invocation(
        self, request_id: str, started: float, status: str, deadline: float, produced_bytes: int = 0
    ) -> None:
        """runtimeDone, then (on Lambda the environment is not reused before) every extension back in next."""
        metrics = {"durationMs": (time.monotonic() - started) * 1000, "producedBytes": produced_bytes}
        self.extensions.emit("platform.runtimeDone", {"requestId": request_id, "status": status, "metrics": metrics})
        if status in ("timeout", "failure"):
            self.shutdown_reason = "timeout" if status == "timeout" else "failure"
            return
        self.extensions.wait_ready(self.expected_extensions, max(0.0, deadline - time.monotonic()))

    def close_invocation(self, request_id: str, started: float, status: str, init_ms: float | None) -> None:
        """END and REPORT lines, and the platform.report event."""
        duration = (time.monotonic() - started) * 1000
        report = Report(request_id, duration, self.function.spec.memory_size, self.max_memory_mb(), init_ms)
        self.print(f"END RequestId: {request_id}")
        self.print(report.line())
        self.report(report, status)

    def report(self, report: Report, status: str) -> None:
        metrics: dict[str, Any] = {
            "durationMs": report.duration_ms,
            "billedDurationMs": report.billed_ms,
            "memorySizeMB": report.memory_mb,
            "maxMemoryUsedMB": report.max_memory_mb,
        }
        if report.init_duration_ms is not None:
            metrics["initDurationMs"] = report.init_duration_ms
        self.extensions.emit("platform.report", {"requestId": report.request_id, "status": status, "metrics": metrics})

    def terminate_runtime(self) -> None:
        """The runtime's part of the Shutdown phase: SIGTERM, and SIGKILL if it has not exited in its 300 ms."""
        if self.process is None or self.process.poll() is not None:
            return
        try:
            os.kill(self.process.pid, signal.SIGTERM)
            self.process.wait(timeout=RUNTIME_SHUTDOWN_SECONDS)
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            self.end_runtime()

    def end_runtime(self) -> None:
        """Stop the runtime process only, at once (its extensions stay for their SHUTDOWN event)."""
        if self.process is not None and self.process.poll() is None:
            try:
                os.kill(self.process.pid, 9)
            except ProcessLookupError:
                pass

    def max_memory_mb(self) -> int:
        """The runtime process's peak resident memory (VmHWM), in MB."""
        return math.ceil(procfs.peak_rss_kb(self.process.pid) / 1024) if self.process is not None else 0

    def extension_memory_mb(self) -> int:
        """Peak resident memory of the environment's other processes (its external extensions), in MB."""
        if self.process is None:
            return 0
        others = [pid for pid in procfs.group_states(self.process.pid) if pid != self.process.pid]
        return math.ceil(sum(procfs.peak_rss_kb(pid) for pid in others) / 1024)

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        self.thaw()  # a frozen environment gets its SHUTDOWN like a running one
        if self.extensions.extensions and self.process is not None:
            # SHUTDOWN: the runtime goes first, then each extension gets the event and up to 2 s to finish.
            self.terminate_runtime()
            self.extensions.flush()
            self.extensions.dispatch(
                {"eventType": "SHUTDOWN", "shutdownReason": self.shutdown_reason, "deadlineMs": _epoch_ms() + 2000}
            )
            _wait_group_exit(self.process.pid, SHUTDOWN_GRACE_SECONDS)
        if self.process is not None:
            try:
                os.killpg(self.process.pid, 9)
            except ProcessLookupError:
                pass
            leases.give_back(self.process.pid)
        self._wait_exit(5)
        self.api.close()
        if self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)
            self._root.with_name(self._root.name + "-hosts").unlink(missing_ok=True)

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    # ------------------------------------------------------------------ freeze and thaw
    def park(self) -> None:
        """The environment is back in its pool: freeze it once it has been idle for FREEZE_AFTER_SECONDS."""
        with self._freeze_lock:
            self._parked = True
            self._arm_freeze()

    def thaw(self) -> None:
        """Before the environment's next event (an invocation, a request, SHUTDOWN): let it run again."""
        with self._freeze_lock:
            self._parked = False
            if self._freeze_timer is not None:
                self._freeze_timer.cancel()
                self._freeze_timer = None
            if self.frozen and self.process is not None:
                self.frozen = False
                try:
                    os.killpg(self.process.pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass

    def _arm_freeze(self) -> None:
        self._freeze_timer = threading.Timer(FREEZE_AFTER_SECONDS, self._freeze_if_idle)
        self._freeze_timer.name = f"freeze-{self.id}"
        self._freeze_timer.daemon = True
        self._freeze_timer.start()

    def _freeze_if_idle(self) -> None:
        with self._freeze_lock:
            if not self._idle_now():
                if self._parked and not self.frozen and not self._stopped and self.alive():
                    self._arm_freeze()  # not yet at its next event: look again later
                return
        # Buffered telemetry reaches the extensions while they still run; outside the lock, so a thaw for
        # the next invocation never waits for a delivery.
        self.extensions.flush()
        with self._freeze_lock:
            if not self._idle_now() or self.process is None:
                return  # taken for an invocation meanwhile (or stopped)
            try:
                os.killpg(self.process.pid, signal.SIGSTOP)
            except OSError as error:  # not allowed to signal it here: it stays running, as before
                log.debug("%s could not be frozen: %s", self.prefix, error)
                return
            self.frozen = True

    def _idle_now(self) -> bool:
        """In its pool, not frozen yet, and the runtime and every extension wait for their next event.
        A handler function's runtime waits in invocation/next; behind the web adapter nothing polls the
        Runtime API and the app is idle once no request holds the environment."""
        if not self._parked or self.frozen or self._stopped or not self.alive():
            return False
        runtime_waits = self.function.exec_wrapper is not None or self.api.waiting.is_set()
        return runtime_waits and self.extensions.ready(self.expected_extensions)

    def print(self, text: str) -> None:
        self._write(f"{self.prefix}{text}\n")

    def _write(self, text: str) -> None:
        """To the console; one that has been closed (a test's captured output, at its end) gets no more."""
        try:
            self.output.write(text)
            self.output.flush()
        except ValueError:  # I/O operation on closed file
            pass

    def _wait_exit(self, seconds: float) -> None:
        if self.process is not None:
            try:
                self.process.wait(timeout=seconds)
            except subprocess.TimeoutExpired:
                pass
        self._output_done.wait(seconds)

    def _pump_output(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        for raw in self.process.stdout:
            # The RIC writes one multi-line log event with \r between its lines (one CloudWatch event).
            lines = raw.decode(errors="replace").rstrip().split("\r")
            self._write("".join(f"{self.prefix}{line}\n" for line in lines))
            self.extensions.emit("function", "\n".join(lines))
        self._output_done.set()


def _cpu_list(cpus: frozenset[int]) -> str:
    return ",".join(str(cpu) for cpu in sorted(cpus))


def _epoch_ms() -> int:
    return int(time.time() * 1000)


def _wait_group_exit(pgid: int, seconds: float) -> None:
    """Wait until no process of the group is left (or the time is up)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not procfs.group_states(pgid):
            return
        time.sleep(0.02)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
