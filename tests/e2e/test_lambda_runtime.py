"""The Lambda runtime's execution model, with small probe functions: what a handler sees (variables,
search path, a read-only file system with a private /tmp), environments reused while warm and started
in parallel up to the function's concurrency, timeouts that end the environment, init failures with
Lambda's error types, REPORT lines, and a layer checked for every module its code imports."""

from __future__ import annotations

import dataclasses
import io
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from devstack.runtime import leases, procfs
from devstack.runtime.execution_environment import LAMBDA_LD_LIBRARY_PATH, LAMBDA_PATH, LambdaFunction
from devstack.runtime.function_errors import FunctionError
from devstack.runtime.lambda_runtime import LambdaRuntime
from devstack.runtime.runtime_image import LambdaRuntimeUnavailable, RuntimeImage, prepare_runtime_image
from devstack.stack.resources import FunctionSpec
from devstack.stack.template import ROOT
from tests.e2e.conftest import BUILD_DIR, require_build, wait_until

pytestmark = pytest.mark.e2e

PROBES = Path(__file__).parent / "lambda_functions"
SHARED_LAYER = BUILD_DIR / "SharedLayer"
MCP_LAYER = BUILD_DIR / "McpLayer"
DURABLE_LAYER = BUILD_DIR / "DurableLayer"
# What the Lambda python runtime documents (configuration-envvars.html), what the runtime interface
# client adds per invocation (_X_AMZN_TRACE_ID), and what Tracing: Active adds.
LAMBDA_VARIABLES = {
    "_HANDLER", "AWS_EXECUTION_ENV", "AWS_LAMBDA_FUNCTION_NAME", "AWS_LAMBDA_FUNCTION_MEMORY_SIZE",
    "AWS_LAMBDA_FUNCTION_VERSION", "AWS_LAMBDA_INITIALIZATION_TYPE", "AWS_LAMBDA_LOG_GROUP_NAME",
    "AWS_LAMBDA_LOG_STREAM_NAME", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_LAMBDA_RUNTIME_API", "LAMBDA_TASK_ROOT",
    "LAMBDA_RUNTIME_DIR", "PATH", "LD_LIBRARY_PATH", "PYTHONPATH", "LANG", "TZ", "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "_X_AMZN_TRACE_ID", "AWS_XRAY_CONTEXT_MISSING",
    "AWS_XRAY_DAEMON_ADDRESS",
}  # fmt: skip
# The runtime's bash bootstrap exports PWD and SHLVL; Python sets LC_CTYPE itself (PEP 538) where this
# machine lacks the en_US.UTF-8 locale Lambda has.
INTERPRETER_VARIABLES = {"PWD", "SHLVL", "LC_CTYPE"}


@pytest.fixture(scope="session")
def image() -> RuntimeImage:
    try:
        return prepare_runtime_image()
    except LambdaRuntimeUnavailable as missing:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"the Lambda runtime is unavailable here: {missing}")


@pytest.fixture
def run(image) -> Iterator[Callable[..., tuple[LambdaRuntime, io.StringIO]]]:
    """A runtime holding one probe function (logical id Probe), its output captured."""
    runtimes: list[LambdaRuntime] = []

    def start(
        handler: str,
        timeout: int = 10,
        concurrency: int = 2,
        layers: tuple[Path, ...] = (),
        environment: dict[str, str] | None = None,
        task_dir: Path = PROBES,
    ) -> tuple[LambdaRuntime, io.StringIO]:
        spec = FunctionSpec(
            logical_id="Probe",
            name="local-Probe",
            arn="arn:aws:lambda:us-east-1:123456789012:function:local-Probe",
            handler=handler,
            code_dir=task_dir,
            layer_dirs=(),
            timeout=timeout,
            memory_size=256,
            environment=environment or {},
        )
        function = LambdaFunction(spec, task_dir, layers, concurrency, "us-east-1", environment or {})
        output = io.StringIO()
        runtime = LambdaRuntime({"Probe": function}, image, output)
        runtimes.append(runtime)
        return runtime, output

    yield start
    for runtime in runtimes:
        runtime.shutdown()


def test_a_handler_sees_exactly_the_variables_lambda_sets_plus_its_own(run, monkeypatch):
    # Given a variable in the developer's shell and a function with one variable of its own
    monkeypatch.setenv("DEVELOPER_SHELL_SECRET", "must-not-leak")
    runtime, _ = run("probe.environment", environment={"TABLE_NAME": "jobs"})

    # When the handler reports its environment
    seen = runtime.invoke("Probe", {})

    # Then it holds Lambda's variables with Lambda's values, its own, and nothing from the shell
    variables = seen["variables"]
    assert set(variables) - INTERPRETER_VARIABLES == LAMBDA_VARIABLES | {"TABLE_NAME"}
    assert (variables["LAMBDA_TASK_ROOT"], variables["LAMBDA_RUNTIME_DIR"]) == ("/var/task", "/var/runtime")
    assert (variables["PATH"], variables["LD_LIBRARY_PATH"]) == (LAMBDA_PATH, LAMBDA_LD_LIBRARY_PATH)
    assert variables["AWS_EXECUTION_ENV"] == "AWS_Lambda_python3.13" and variables["TABLE_NAME"] == "jobs"
    # and the module search path is the runtime's: code, then the layers, then the runtime
    assert seen["cwd"] == "/var/task"
    layers = ["/opt/python/lib/python3.13/site-packages", "/opt/python"]
    assert seen["sys_path"][:4] == ["/var/task", *layers, "/var/runtime"]


def test_code_layers_and_runtime_are_read_only_and_tmp_is_private_to_each_environment(run):
    require_build(SHARED_LAYER)
    # Given a function with the shared layer, allowed two environments
    runtime, _ = run("probe.write", layers=(SHARED_LAYER,), concurrency=2)
    targets = ["/var/task/out.txt", "/opt/python/out.txt", "/var/runtime/out.txt", "/out.txt", "/tmp/out.txt"]

    # When two concurrent invocations (two environments) try to write everywhere
    with ThreadPoolExecutor(2) as pool:
        first, second = pool.map(lambda _: runtime.invoke("Probe", {"paths": targets}), range(2))

    # Then only /tmp takes the write, in each environment separately
    assert first == second == {**dict.fromkeys(targets[:-1], "Read-only file system"), "/tmp/out.txt": "written"}
    assert not Path("/tmp/out.txt").exists()  # the machine's /tmp is not the function's


def test_a_warm_environment_is_reused_and_concurrent_invocations_get_their_own(run):
    # Given a function allowed two environments
    runtime, _ = run("probe.identity", concurrency=2)

    # When one invocation runs alone, then three run at once
    alone = runtime.invoke("Probe", {})
    with ThreadPoolExecutor(3) as pool:
        together = list(pool.map(lambda _: runtime.invoke("Probe", {"seconds": 0.5}), range(3)))

    # Then the first environment was reused, and never more than two ran: one more was started
    environments = {alone["environment"]} | {answer["environment"] for answer in together}
    assert len(environments) == 2
    assert runtime.pool("Probe").cold_starts == 2
    assert len({answer["pid"] for answer in together}) == 2


def test_an_environment_started_on_chosen_cpus_runs_every_thread_of_every_process_on_them(run):
    # Given a function whose environments are to run on one CPU (what the worker benchmark asks for)
    runtime, _ = run("probe.identity")
    cpu = min(os.sched_getaffinity(0))
    runtime.pool("Probe").cpus = frozenset({cpu})

    # When an invocation starts its environment
    runtime.invoke("Probe", {})

    # Then every thread of every process of that environment may run on that CPU only
    (env,) = runtime.pool("Probe").environments()
    assert env.process is not None
    allowed = [
        cpus for pid in procfs.group_states(env.process.pid) for cpus in procfs.allowed_cpus_by_thread(pid).values()
    ]
    assert allowed and set(allowed) == {str(cpu)}


def test_an_invocation_past_its_timeout_ends_its_environment_and_the_next_is_a_cold_start(run):
    # Given a warm function with a 1 s timeout
    runtime, output = run("probe.identity", timeout=1)
    before = runtime.invoke("Probe", {})

    # When an invocation runs past the timeout
    with pytest.raises(FunctionError) as timed_out:
        runtime.invoke("Probe", {"seconds": 30})
    after = runtime.invoke("Probe", {})

    # Then it fails as Lambda reports a timeout, and the next invocation gets a new environment
    assert timed_out.value.error_type == "Sandbox.Timedout"
    assert "Task timed out after 1.00 seconds" in timed_out.value.document["errorMessage"]
    assert after["environment"] != before["environment"]
    assert runtime.pool("Probe").cold_starts == 2
    assert output.getvalue().count("Init Duration") == 2


@pytest.mark.parametrize(
    ("handler", "error_type"),
    [
        ("broken_import.handler", "Runtime.ImportModuleError"),
        ("probe.no_such_handler", "Runtime.HandlerNotFound"),
        ("no_such_module.handler", "Runtime.ImportModuleError"),
    ],
)
def test_a_handler_that_cannot_load_fails_the_invocation_with_lambdas_error_type(run, handler, error_type):
    # Given a function whose handler path is wrong or whose module cannot import
    runtime, _ = run(handler)

    # When it is invoked
    with pytest.raises(FunctionError) as failed:
        runtime.invoke("Probe", {})

    # Then the invocation fails with the init error the runtime interface client reported
    assert failed.value.error_type == error_type


def test_each_invocation_ends_with_a_report_line_and_init_duration_only_on_a_cold_start(run):
    # Given a function
    runtime, output = run("probe.identity")

    # When it is invoked twice
    runtime.invoke("Probe", {})
    runtime.invoke("Probe", {})

    # Then two REPORT lines carry duration and memory; only the first has an init duration
    reports = [line for line in output.getvalue().splitlines() if "REPORT RequestId:" in line]
    assert len(reports) == 2
    assert all("Duration:" in line and "Max Memory Used:" in line for line in reports)
    assert "Init Duration:" in reports[0] and "Init Duration:" not in reports[1]
    assert all(line.startswith("[Probe/") for line in output.getvalue().splitlines())


def test_every_module_of_the_built_layer_imports_in_the_sandbox(run):
    require_build(SHARED_LAYER, MCP_LAYER, DURABLE_LAYER)
    # Given the built core, MCP and durable layers merged at /opt (each ships python/): each module of the package
    # runs in a function that has its layer (McpServer the MCP layer, DurableToolWorker the durable one)
    runtime, _ = run("probe.import_all", layers=(SHARED_LAYER, MCP_LAYER, DURABLE_LAYER), timeout=60)

    # When every module of the layer's package is imported inside the sandbox
    failures = runtime.invoke("Probe", {"package": "mcp_backend"})

    # Then none fails: the layer ships every dependency its code imports
    assert failures == {}


def test_a_layer_missing_a_dependency_its_code_imports_is_caught(run, tmp_path):
    require_build(SHARED_LAYER, MCP_LAYER, DURABLE_LAYER)
    # Given a copy of the built layer without httpx (as if requirements.txt had lost it)
    layer = tmp_path / "layer"
    shutil.copytree(SHARED_LAYER, layer, ignore=shutil.ignore_patterns("httpx", "httpx-*"))
    runtime, _ = run("probe.import_all", layers=(layer, MCP_LAYER, DURABLE_LAYER), timeout=60)

    # When every module of the layer's package is imported inside the sandbox
    failures = runtime.invoke("Probe", {"package": "mcp_backend"})

    # Then the modules that need httpx are named, with the missing module
    assert failures
    assert all("No module named 'httpx'" in reason for reason in failures.values())


def test_without_namespaces_the_runtime_says_so_and_runs_the_handler_on_emulated_paths(image, caplog):
    # Given a machine without user namespaces (macOS): the same bootstrap and RIC, host folders for the paths
    emulated = dataclasses.replace(image, namespaces=False)
    spec = FunctionSpec("Probe", "local-Probe", "arn:aws:lambda:us-east-1:123456789012:function:local-Probe",
                        "probe.environment", PROBES, (), 10, 128, {})  # fmt: skip
    runtime = LambdaRuntime({"Probe": LambdaFunction(spec, PROBES, (SHARED_LAYER,), 1, "us-east-1", {})}, emulated)

    # When the handler is invoked
    try:
        seen = runtime.invoke("Probe", {})
    finally:
        runtime.shutdown()

    # Then it ran from the host folder, and one warning named what this run does not prove
    assert seen["variables"]["LAMBDA_TASK_ROOT"] == str(PROBES)
    [warning] = [r.getMessage() for r in caplog.records if "emulated paths" in r.getMessage()]
    assert "read-only code" in warning


# A test run that holds a warm environment of the probe function, prints its process group and waits to be killed.
HOLDER = """
import sys, time
from pathlib import Path
from devstack.runtime import leases
from devstack.runtime.execution_environment import LambdaFunction
from devstack.runtime.lambda_runtime import LambdaRuntime
from devstack.runtime.runtime_image import prepare_runtime_image
from devstack.stack.resources import FunctionSpec
probes, leases.LEASES = Path(sys.argv[1]), Path(sys.argv[2])
spec = FunctionSpec("Probe", "local-Probe", "arn:aws:lambda:us-east-1:123456789012:function:local-Probe",
                    "probe.identity", probes, (), 10, 128, {})
function = LambdaFunction(spec, probes, (), 1, "us-east-1", {})
runtime = LambdaRuntime({"Probe": function}, prepare_runtime_image(), sys.stderr)
runtime.invoke("Probe", {})
[environment] = runtime.pool("Probe").environments()
print(environment.process.pid, flush=True)
time.sleep(600)
"""


def test_environments_of_a_test_run_killed_with_sigkill_are_ended_by_the_next_runtime(image, tmp_path, monkeypatch):
    # Given a test run holding a warm execution environment, frozen once idle, killed with SIGKILL (no cleanup);
    # its leases in a folder of their own, so no other runtime on the machine ends it first
    monkeypatch.setattr(leases, "LEASES", tmp_path / "leases")
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(PROBES), str(leases.LEASES)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": f"{ROOT}:{ROOT / 'layers' / 'shared'}"},
    )
    assert holder.stdout is not None
    pgid = int(holder.stdout.readline())
    assert wait_until(lambda: "T" in procfs.group_states(pgid).values()), "the idle environment was never frozen"
    holder.kill()
    holder.wait()

    # When the next runtime starts on this machine
    LambdaRuntime({}, image, io.StringIO())

    # Then the orphaned environment's process group is ended and its lease removed
    assert wait_until(lambda: procfs.start_time(pgid) is None, seconds=10)
    assert not (leases.LEASES / str(pgid)).exists()
