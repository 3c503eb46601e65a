"""Functions run the way Lambda runs them: the built artifact, in a Lambda-shaped sandbox per execution
environment, started by the runtime's own bootstrap and AWS's Runtime Interface Client (awslambdaric).

- An execution environment is one process tree started from `.aws-sam/build/<LogicalId>` (see
  devstack.sandbox for its file system) with exactly the variables the Lambda Python runtime documents,
  the template's Environment and the local stack's endpoints. It serves one invocation at a time
  through its own Runtime API (devstack.runtime_api) and is reused while warm.
- A function gets up to N environments at once: its ReservedConcurrentExecutions, else its SQS
  mapping's ScalingConfig.MaximumConcurrency, else DEFAULT_CONCURRENCY.
- An invocation past the function's Timeout kills its environment (the next one is a cold start) and
  fails with Sandbox.Timedout; an init failure (an import error, a start script that exits, a
  readiness check that never answers) fails the invocation with the error type Lambda gives it.
- Each environment's output is prefixed `[LogicalId/env] `; each invocation ends with a REPORT line.
- Exec-wrapper functions behind the Lambda Web Adapter are started through the wrapper, which runs
  their start script; devstack.web_adapter then plays the adapter's part (readiness check, proxying).
- An idle environment is frozen (SIGSTOP to its process group: the runtime, its extensions and what a
  start script launched) and thawed (SIGCONT) before its next event: an invocation, a proxied request or
  SHUTDOWN. "Lambda freezes the execution environment when the runtime and each extension have completed
  and there are no pending events" (lambda-runtime-environment.html); here after FREEZE_AFTER_SECONDS.

https://docs.aws.amazon.com/lambda/latest/dg/lambda-runtime-environment.html (lifecycle, init, timeouts)
https://docs.aws.amazon.com/lambda/latest/dg/configuration-envvars.html (defined runtime variables)
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import math
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import httpx

from devstack import leases, procfs
from devstack.extensions_api import SANDBOX_HOST, ExtensionsApi
from devstack.function_errors import FunctionError
from devstack.interpreter import RUNTIME_VERSION, UV, InterpreterNotFound, find_runtime_python
from devstack.runtime_api import Invocation, RuntimeApi
from devstack.sandbox import (
    RUNTIME_DIR,
    TASK_ROOT,
    SandboxLayout,
    emulated_paths,
    namespaces_available,
    opt_dir,
    sandbox_command,
    unavailable_reason,
)
from devstack.stack import FunctionSpec
from devstack.template import ROOT

log = logging.getLogger("devstack.lambda")

DEFAULT_CONCURRENCY = 4
DEFAULT_BUILD_DIR = ROOT / ".aws-sam" / "build"
RUNTIME_CACHE = ROOT / ".devstack" / "runtime"
BOOTSTRAP_FILES = Path(__file__).parent / "var_runtime"
# Stand-in for the Lambda Web Adapter layer's /opt/bootstrap (exec the function's start script); the
# adapter's extension half is devstack.web_adapter.
WEB_ADAPTER_LAYER = Path(__file__).parent / "layers" / "lambda-web-adapter"
WEB_ADAPTER_LAYER_NAME = ":layer:LambdaAdapterLayer"
# Lambda's values for the Python runtimes: configuration-envvars.html lists PATH and LD_LIBRARY_PATH (its
# older copies omit /var/lang, which the python3.11+ runtimes put first; that part is from the runtime
# images, not from a page found here).
LAMBDA_PATH = "/var/lang/bin:/usr/local/bin:/usr/bin/:/bin:/opt/bin"
LAMBDA_LD_LIBRARY_PATH = (
    "/var/lang/lib:/lib64:/usr/lib64:/var/runtime:/var/runtime/lib:/var/task:/var/task/lib:/opt/lib"
)
# Files that drive the build rather than being copied into it.
_BUILD_INPUTS = {"Makefile", "requirements.txt"}
INIT_LIMIT_SECONDS = 10.0
# The Shutdown phase's limit: 2,000 ms, of which up to 300 ms go to the runtime and the rest to external
# extensions (runtimes-extensions-api.html, Shutdown phase). Here the runtime is killed at once.
SHUTDOWN_GRACE_SECONDS = 2.0
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


class Throttled(Exception):
    """Every environment the function may have is busy and the caller asked not to wait."""


class LambdaRuntimeUnavailable(Exception):
    """The Lambda runtime cannot start on this machine; the message is one line saying how to fix it."""


def host_architecture() -> str:
    machine = platform.machine().lower()
    return {"aarch64": "arm64", "arm64": "arm64", "x86_64": "x86_64", "amd64": "x86_64"}.get(machine, machine)


def check_build(build_dir: Path, architecture: str, code_paths: dict[str, Path]) -> None:
    """Refuse a missing build, one for another architecture, or one older than the source."""
    make = "make build" if architecture == "arm64" else f"make build ARCH={architecture}"
    if build_dir.resolve() != DEFAULT_BUILD_DIR:
        make += f" BUILD_DIR={build_dir}"
    if not (build_dir / "template.yaml").exists():
        raise LambdaRuntimeUnavailable(f"no build in {build_dir}: run `{make}` first")
    machine = "aarch64" if architecture == "arm64" else architecture
    foreign = [so for so in build_dir.glob("*/python/**/*.cpython-*-linux-gnu.so") if f"-{machine}-" not in so.name]
    if foreign:
        raise LambdaRuntimeUnavailable(
            f"{build_dir} was built for another architecture ({foreign[0].name}): "
            f"run `{make}` for this {architecture} host"
        )
    for logical_id, source in code_paths.items():
        changed = _first_unbuilt_file(source, build_dir / logical_id)
        if changed is not None:
            raise LambdaRuntimeUnavailable(f"{build_dir} is older than {changed}: run `{make}`")


def _first_unbuilt_file(source: Path, built: Path) -> Path | None:
    """A source file whose built copy (at its path, or under python/ for a layer) is missing or differs."""
    for path in sorted(source.rglob("*")):
        if not path.is_file() or path.name in _BUILD_INPUTS or "__pycache__" in path.parts:
            continue
        relative = path.relative_to(source)
        copies = [built / relative, built / "python" / relative]
        if not any(copy.is_file() and copy.read_bytes() == path.read_bytes() for copy in copies):
            return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    return None


# ---------------------------------------------------------------------- the runtime's own files
@dataclass(frozen=True)
class RuntimeImage:
    """What every environment shares: python3.13 (/var/lang), the RIC (/var/runtime), boto3."""

    python: Path
    prefix: Path
    runtime_dir: Path
    provided_packages: Path
    architecture: str
    namespaces: bool


def prepare_runtime_image() -> RuntimeImage:
    try:
        python = find_runtime_python(install=True)
    except InterpreterNotFound as missing:
        raise LambdaRuntimeUnavailable(str(missing)) from None
    prefix = Path(
        subprocess.run(
            [str(python), "-c", "import sys; print(sys.base_prefix)"], capture_output=True, text=True, check=True
        ).stdout.strip()
    )
    architecture = host_architecture()
    interface = _export_group("lambda-runtime-interface")
    provided = _export_group("lambda-runtime-provided")
    bootstrap = b"".join(p.read_bytes() for p in sorted(BOOTSTRAP_FILES.iterdir()))
    key = hashlib.sha256(
        b"\0".join([interface.encode(), provided.encode(), bootstrap, str(prefix).encode(), architecture.encode()])
    ).hexdigest()[:16]
    base = RUNTIME_CACHE / f"python{RUNTIME_VERSION}-{architecture}-{key}"
    if not (base / "ready").exists():
        # Built aside and renamed into place: processes that start at once (a parallel test run's workers)
        # each build their own, the first rename wins, and none ever reads a half-built image.
        building = base.with_name(f"{base.name}.{os.getpid()}.building")
        shutil.rmtree(building, ignore_errors=True)
        _install(python, interface, building / "var-runtime")
        _install(python, provided, building / "site-packages")
        for source in BOOTSTRAP_FILES.iterdir():
            shutil.copy2(source, building / "var-runtime" / source.name)
        (building / "ready").write_text("")
        try:
            building.rename(base)
        except OSError:
            if (base / "ready").exists():  # another process's image is in place
                shutil.rmtree(building, ignore_errors=True)
            else:  # one an interrupted install left half-built
                shutil.rmtree(base, ignore_errors=True)
                building.rename(base)
    runtime_dir, provided_dir = base / "var-runtime", base / "site-packages"
    return RuntimeImage(python, prefix, runtime_dir, provided_dir, architecture, namespaces_available())


def _export_group(group: str) -> str:
    """A dependency group's pins from uv.lock (the versions the local runtime installs)."""
    return subprocess.run(
        [str(UV), "export", "--frozen", "--only-group", group, "--no-hashes", "--no-header", "--no-emit-project"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    ).stdout


def _install(python: Path, requirements: str, target: Path) -> None:
    target.mkdir(parents=True)
    with tempfile.NamedTemporaryFile("w", suffix=".txt") as pins:
        pins.write(requirements)
        pins.flush()
        result = subprocess.run(
            [str(UV), "pip", "install", "--quiet", "--python", str(python), "--target", str(target), "-r", pins.name],
            capture_output=True,
            text=True,
            check=False,
        )
    if result.returncode != 0:
        raise LambdaRuntimeUnavailable(f"could not install the Lambda runtime's packages: {result.stderr.strip()}")


# ---------------------------------------------------------------------- one function as Lambda sees it
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


@dataclass
class Report:
    request_id: str
    duration_ms: float
    memory_mb: int
    max_memory_mb: int
    init_duration_ms: float | None

    @property
    def billed_ms(self) -> int:
        return math.ceil(self.duration_ms + (self.init_duration_ms or 0))

    def line(self) -> str:
        text = (
            f"REPORT RequestId: {self.request_id}\tDuration: {self.duration_ms:.2f} ms\t"
            f"Billed Duration: {self.billed_ms} ms\t"
            f"Memory Size: {self.memory_mb} MB\tMax Memory Used: {self.max_memory_mb} MB"
        )
        if self.init_duration_ms is not None:
            text += f"\tInit Duration: {self.init_duration_ms:.2f} ms"
        return text


@dataclass(frozen=True)
class AdapterSettings:
    readiness_path: str
    readiness_protocol: str
    healthy: tuple[tuple[int, int], ...]
    streaming: bool

    @classmethod
    def from_environment(cls, environment: dict[str, str]) -> AdapterSettings:
        ranges = []
        for part in environment.get("AWS_LWA_READINESS_CHECK_HEALTHY_STATUS", "100-499").split(","):
            low, _, high = part.strip().partition("-")
            ranges.append((int(low), int(high or low)))
        return cls(
            readiness_path=environment.get("AWS_LWA_READINESS_CHECK_PATH", "/"),
            readiness_protocol=environment.get("AWS_LWA_READINESS_CHECK_PROTOCOL", "http"),
            healthy=tuple(ranges),
            streaming=environment.get("AWS_LWA_INVOKE_MODE", "buffered").lower() == "response_stream",
        )

    def ready(self, env: ExecutionEnvironment) -> bool:
        """One readiness check of the environment's app."""
        if self.readiness_protocol == "tcp":
            try:
                with socket.create_connection(("127.0.0.1", env.port or 0), timeout=0.2):
                    return True
            except OSError:
                return False
        try:
            status = httpx.get(f"http://127.0.0.1:{env.port}{self.readiness_path}", timeout=0.5).status_code
        except httpx.HTTPError:
            return False
        return any(low <= status <= high for low, high in self.healthy)


class ExecutionEnvironment:
    """One sandboxed process tree serving one invocation at a time."""

    def __init__(self, function: LambdaFunction, image: RuntimeImage, output: TextIO) -> None:
        self.function = function
        self.image = image
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
            "AWS_LAMBDA_INITIALIZATION_TYPE": "on-demand",
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
            self.end_invocation(request_id, started, _status(error), deadline)
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

    def end_runtime(self) -> None:
        """Stop the runtime process only (its extensions stay for their SHUTDOWN event)."""
        if self.process is not None and self.process.poll() is None:
            try:
                os.kill(self.process.pid, 9)
            except ProcessLookupError:
                pass

    def cpu_seconds(self) -> float:
        """CPU time (user + system) the runtime process has used: the function's own work, without its
        extensions'; 0 once it is gone."""
        return (procfs.cpu_seconds(self.process.pid) or 0.0) if self.process is not None else 0.0

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
            self.end_runtime()
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


def external_extensions(layer_dirs: tuple[Path, ...]) -> list[Path]:
    """The executables Lambda starts as external extensions: /opt/extensions/* of the merged layers."""
    return sorted(
        path
        for layer in layer_dirs
        if (layer / "extensions").is_dir()
        for path in (layer / "extensions").iterdir()
        if path.is_file() and os.access(path, os.X_OK)
    )


def _status(error: FunctionError) -> str:
    """The Telemetry API status of a failed invocation."""
    return {"Sandbox.Timedout": "timeout", "Runtime.ExitError": "failure"}.get(error.error_type, "error")


def _epoch_ms() -> int:
    return int(time.time() * 1000)


def _wait_group_exit(pgid: int, seconds: float) -> None:
    """Wait until no process of the group is left (or the time is up)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not procfs.group_states(pgid):
            return
        time.sleep(0.02)


def timeout_document(request_id: str, timeout: int) -> dict[str, Any]:
    """A timed-out invocation's error as Lambda reports it to Invoke and Destinations. The type and wording
    are as Lambda returns them; no documentation page spelling them out was found with the search tool."""
    return {
        "errorType": "Sandbox.Timedout",
        "errorMessage": f"RequestId: {request_id} Error: Task timed out after {timeout:.2f} seconds",
    }


class FunctionPool:
    """A function's execution environments: one invocation each at a time, reused while warm."""

    def __init__(self, function: LambdaFunction, image: RuntimeImage, output: TextIO) -> None:
        self.function = function
        self.image = image
        self.output = output
        self._idle: list[ExecutionEnvironment] = []
        self._count = 0
        self._all: set[ExecutionEnvironment] = set()
        self._condition = threading.Condition()
        self.cold_starts = 0

    @contextmanager
    def environment(self, wait: bool = True) -> Iterator[ExecutionEnvironment]:
        """An initialized environment for one invocation; it returns to the pool unless it was ended.
        wait=False raises Throttled instead of waiting for a busy environment."""
        env = self._acquire(wait)
        healthy = False
        try:
            yield env
            healthy = env.alive()
        except FunctionError as error:
            healthy = env.alive() and error.error_type not in ("Sandbox.Timedout", "Runtime.ExitError")
            raise
        finally:
            self._release(env, healthy)

    def invoke(self, event: Any) -> Any:
        payload = json.dumps(event).encode()
        with self.environment() as env:
            init_ms = env.init_duration_ms if env.cold else None
            env.cold = False
            started = time.monotonic()
            deadline = started + self.function.spec.timeout
            request_id = str(uuid.uuid4())
            env.print(f"START RequestId: {request_id} Version: $LATEST")
            status = "success"
            try:
                response = env.invoke(payload, deadline, request_id)
            except FunctionError as error:
                status = _status(error)
                if error.error_type == "Sandbox.Timedout":
                    env.print(str(error.document["errorMessage"]))
                raise
            finally:
                env.close_invocation(request_id, started, status, init_ms)
        return json.loads(response) if response else None

    def cpu_seconds(self) -> float:
        """CPU time the function's live environments have used (benchmarks)."""
        return sum(env.cpu_seconds() for env in self.environments())

    def environments(self) -> list[ExecutionEnvironment]:
        """The function's environments now: busy, idle and frozen ones."""
        with self._condition:
            return list(self._all)

    def release_all(self) -> list[ExecutionEnvironment]:
        """Every environment of the function, none idle any more (the caller stops them)."""
        with self._condition:
            self._idle.clear()
            return list(self._all)

    def _acquire(self, wait: bool) -> ExecutionEnvironment:
        with self._condition:
            while True:
                while self._idle:
                    env = self._idle.pop()
                    if env.alive():
                        env.thaw()
                        return env
                    self._forget(env)
                if self._count < self.function.concurrency:
                    self._count += 1
                    break
                if not wait:
                    raise Throttled(self.function.spec.logical_id)
                self._condition.wait()
        env = ExecutionEnvironment(self.function, self.image, self.output)
        with self._condition:
            self._all.add(env)
        try:
            env.start()
            limit = max(INIT_LIMIT_SECONDS, float(self.function.spec.timeout))
            # An exec-wrapper function behind the web adapter is ready when its app answers the adapter's
            # readiness check; a handler function when the runtime asks for its first invocation.
            adapter = (
                AdapterSettings.from_environment(self.function.environment) if self.function.exec_wrapper else None
            )
            env.wait_initialized(limit, (lambda: adapter.ready(env)) if adapter is not None else None)
        except BaseException:
            env.stop()
            with self._condition:
                self._forget(env)
                self._condition.notify()
            raise
        self.cold_starts += 1
        return env

    def _release(self, env: ExecutionEnvironment, healthy: bool) -> None:
        if healthy:
            env.park()  # before it is idle in the pool: whoever takes it next thaws it
        else:
            env.stop()
        with self._condition:
            if healthy:
                self._idle.append(env)
            else:
                self._forget(env)
            self._condition.notify()

    def _forget(self, env: ExecutionEnvironment) -> None:
        if env in self._all:
            self._all.discard(env)
            self._count -= 1


class LambdaRuntime:
    """Every function of the stack, each with its pool of execution environments."""

    def __init__(
        self,
        functions: dict[str, LambdaFunction],
        image: RuntimeImage,
        output: TextIO | None = None,
    ) -> None:
        self.functions = functions
        self.image = image
        self.output = output or sys.stdout
        # Environments left frozen by an owner that was killed (a `kill -9` of make dev or of a test run).
        for pgid in leases.reap():
            self.output.write(f"ended environment process group {pgid}: its owner is gone\n")
        self._pools: dict[str, FunctionPool] = {}
        self._lock = threading.Lock()
        if not image.namespaces:
            log.warning(
                "%s: the Lambda runtime runs with emulated paths (host folders for /var/task, /opt, /var/runtime); "
                "read-only code, the /opt layout, start scripts' PYTHONPATH and writes outside /tmp are not checked",
                unavailable_reason(),
            )

    def pool(self, logical_id: str) -> FunctionPool:
        with self._lock:
            if logical_id not in self._pools:
                self._pools[logical_id] = FunctionPool(self.functions[logical_id], self.image, self.output)
            return self._pools[logical_id]

    def invoke(self, logical_id: str, event: Any) -> Any:
        return self.pool(logical_id).invoke(event)

    def shutdown(self) -> None:
        """Stop every environment at once, as Lambda shuts environments down independently: each may give
        its extensions up to SHUTDOWN_GRACE_SECONDS, and the stack's stop waits for the slowest, not the sum."""
        environments = [env for pool in list(self._pools.values()) for env in pool.release_all()]
        if environments:
            with ThreadPoolExecutor(max_workers=len(environments), thread_name_prefix="shutdown") as stopping:
                list(stopping.map(ExecutionEnvironment.stop, environments))


def layer_dirs_for(layer_refs: list[str], build_dir: Path, code_paths: dict[str, Path]) -> tuple[Path, ...]:
    """Each of the function's layers as a folder to merge into /opt: local layers from the build
    output, the Web Adapter layer from its local stand-in. Other published layers are not emulated."""
    by_source = {str(path): logical_id for logical_id, path in code_paths.items()}
    dirs = []
    for ref in layer_refs:
        if ref in by_source:
            dirs.append(build_dir / by_source[ref])
        elif WEB_ADAPTER_LAYER_NAME in ref:
            dirs.append(WEB_ADAPTER_LAYER)
    return tuple(dirs)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
