"""Every fixture in events/ through `make invoke`'s own path, twice: on a fresh stack (`--fresh`) and inside a
running `make dev`, in the runtime the suite runs in (in-process, or the build output in the Lambda runtime under
`make test`), with the state the fixture declares seeded first. One `make invoke` runs as a newcomer runs it (its
own process, its own fresh stack); the fresh cases share one fresh stack, started as `make invoke` starts it, and
the running cases one `make dev`, so the file stays within the suite's time."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from devstack import invoke
from devstack.__main__ import issue_dev_keys
from devstack.invoke import fresh_stack, invoke_on
from devstack.running_stack import running_stack
from devstack.runtime.function_errors import FunctionError
from devstack.runtime.runtime_image import LambdaRuntimeUnavailable
from devstack.server import DevStack
from tests.conftest import EVENTS, ROOT
from tests.e2e.conftest import BUILD_DIR, MAKE_DEV_GROUP, PRODUCT_RUNTIME, start_make_dev

pytestmark = pytest.mark.e2e

# The function(s) each fixture folder is for (a MonitorTable stream record feeds both of its consumers).
FUNCTIONS_BY_FOLDER = {
    "alert_handler": ["AlertHandler"],
    "call_log_analyzer": ["CallLogAnalyzer"],
    "mcp_server": ["McpServer"],
    "monitor_table": ["DriftDetector", "ExpiryRollup"],
    "probe_dispatcher": ["ProbeDispatcher"],
    "probe_recorder": ["ProbeRecorder"],
    "probe_worker": ["ProbeWorker"],
    "tool_worker": ["ToolWorker"],
}
FIXTURES = sorted(p for p in EVENTS.rglob("*.json") if "datasets" not in p.parts and not p.name.endswith(".state.json"))
# Pairs Lambda never makes: DriftDetector's filter (an INSERT of a probe_result) drops every record of a TTL delete,
# which is ExpiryRollup's to read (tests/unit/test_stream_filters.py holds both filters to the fixtures).
NEVER_DELIVERED = {("DriftDetector", "monitor_table/probe-result-ttl-remove")}
CASES = [
    (function, fixture)
    for fixture in FIXTURES
    for function in FUNCTIONS_BY_FOLDER[fixture.parent.name]
    if (function, f"{fixture.parent.name}/{fixture.stem}") not in NEVER_DELIVERED
]


def test_every_fixture_folder_names_the_functions_it_is_for():
    assert {fixture.parent.name for fixture in FIXTURES} == set(FUNCTIONS_BY_FOLDER)


@pytest.fixture(scope="module")
def fresh_stack_with_keys() -> Iterator[tuple[DevStack, dict[str, str]]]:
    try:
        stack = fresh_stack(PRODUCT_RUNTIME, BUILD_DIR)
    except LambdaRuntimeUnavailable as missing:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"the Lambda runtime is unavailable here: {missing}")
    try:
        yield stack, issue_dev_keys(stack)
    finally:
        stack.stop()


def state_of(fixture: Path) -> dict:
    declared = fixture.with_name(fixture.stem + ".state.json")
    return json.loads(declared.read_text()) if declared.exists() else {}


def make_invoke(function: str, fixture: Path) -> subprocess.CompletedProcess[str]:
    """What `make invoke FUNCTION=... EVENT=...` runs, with no `make dev` running (a fresh stack)."""
    command = [sys.executable, "-m", "devstack.invoke", "--fresh", "--runtime", PRODUCT_RUNTIME]
    command += ["--build-dir", str(BUILD_DIR), function, str(fixture.relative_to(ROOT))]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)


def response_of(stdout: str) -> dict:
    """The response `make invoke` prints last, indented, after the function's own (one-line) log lines."""
    lines = stdout.splitlines()
    start = max(index for index, line in enumerate(lines) if line == "{")
    return json.loads("\n".join(lines[start:]))


def test_a_fixture_runs_through_make_invoke_as_a_newcomer_runs_it():
    # When a newcomer runs a fixture that needs seeded state through make invoke, with no stack running
    result = make_invoke("ProbeWorker", EVENTS / "probe_worker" / "target.json")
    if result.returncode == 2 and "Lambda runtime is unavailable" in result.stderr and not os.environ.get("CI"):
        pytest.skip(result.stderr.strip().splitlines()[-1])

    # Then the function answers without an error and no traceback is printed
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "errorType" not in response_of(result.stdout)
    assert "Traceback" not in result.stderr, result.stderr[-3000:]


@pytest.mark.parametrize(("function", "fixture"), CASES, ids=[f"{f}-{p.parent.name}/{p.stem}" for f, p in CASES])
def test_the_fixture_runs_on_a_fresh_stack_as_make_invoke_runs_it(
    fresh_stack_with_keys, function, fixture, monkeypatch
):
    # Given a fresh stack, started as make invoke starts one (the suite's per-test AWS isolation points this
    # process back at it: in-process functions reach the stack through the environment it set)
    stack, keys = fresh_stack_with_keys
    monkeypatch.setenv("AWS_ENDPOINT_URL", stack.aws_url)
    monkeypatch.setenv("AWS_ENDPOINT_URL_LAMBDA", stack.lambda_url)

    # When the fixture runs through make invoke's own path (its declared state seeded first)
    try:
        response = invoke_on(stack, function, json.loads(fixture.read_text()), state_of(fixture), keys)
    except FunctionError as error:
        pytest.fail(f"{function} failed: {error.document}")

    # Then the function answers without an error
    assert "errorType" not in response, response
    if function == "McpServer":
        # a Function URL request, answered as the Function URL would: the tool list
        assert response["statusCode"] == 200, response
        assert "submit_analysis" in response["body"]


@pytest.fixture(scope="module")
def running_make_dev(tmp_path_factory) -> Iterator[dict]:
    """`make dev` in the suite's runtime, as the Quickstart starts it before its first `make invoke`. It announces
    itself in a file of its own (DEVSTACK_RUNNING_FILE), which each test's `make invoke` reads: another test's
    `make dev` on the same worker announces itself in the shared file, and is never the one these tests find."""
    announced = tmp_path_factory.mktemp("make-dev") / "running.json"
    os.environ["DEVSTACK_RUNNING_FILE"] = str(announced)
    try:
        process, _, line = start_make_dev("--runtime", PRODUCT_RUNTIME, "--build-dir", str(BUILD_DIR))
    finally:
        del os.environ["DEVSTACK_RUNNING_FILE"]
    # Its log is read to the end as it comes, so a full pipe never stalls the stack.
    drain = threading.Thread(target=lambda: process.stdout and process.stdout.read(), daemon=True)
    drain.start()
    try:
        if "Lambda runtime is unavailable" in line and not os.environ.get("CI"):
            pytest.skip(line.strip())
        assert "local stack ready" in line, line
        os.environ["DEVSTACK_RUNNING_FILE"] = str(announced)
        endpoints = running_stack()
        del os.environ["DEVSTACK_RUNNING_FILE"]
        assert endpoints is not None, "make dev did not announce itself"
        yield {**endpoints, "file": str(announced)}
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            # Its stop waits for batches still in delivery; after every fixture in the Lambda runtime that once
            # took longer than this in CI. The tests above are done: end it (its environments are leased to it,
            # so the next runtime reaps them) rather than fail them at teardown.
            process.kill()
            process.wait(timeout=30)
        drain.join(timeout=10)


@MAKE_DEV_GROUP
@pytest.mark.parametrize(("function", "fixture"), CASES, ids=[f"{f}-{p.parent.name}/{p.stem}" for f, p in CASES])
def test_the_fixture_runs_inside_a_running_make_dev(running_make_dev, function, fixture, capsys, monkeypatch):
    # Given make dev running (no --fresh: make invoke finds it)
    monkeypatch.setenv("DEVSTACK_RUNNING_FILE", running_make_dev["file"])
    # When the fixture runs through make invoke with the suite's RUNTIME=
    argv = ["--runtime", PRODUCT_RUNTIME, "--build-dir", str(BUILD_DIR), function, str(fixture)]
    code = invoke.main(argv)
    captured = capsys.readouterr()

    # Then it ran in the running stack, in that runtime (its declared state seeded there), without an error
    assert code == 0, captured.out[-3000:] + captured.err[-3000:]
    assert f"running stack ({running_make_dev['lambda']}), {PRODUCT_RUNTIME} runtime" in captured.err or (
        f"running stack's URL {running_make_dev['urls'].get(function)}" in captured.err
    ), captured.err
    response = response_of(captured.out)
    assert "errorType" not in response, response
    if function == "McpServer":
        # a Function URL request, sent to the URL make dev serves: the tool list
        assert response["statusCode"] == 200, response
        assert "submit_analysis" in response["body"]


@MAKE_DEV_GROUP
def test_make_invoke_runs_a_function_in_the_runtime_named_inside_a_running_make_dev(
    running_make_dev, capsys, monkeypatch
):
    monkeypatch.setenv("DEVSTACK_RUNNING_FILE", running_make_dev["file"])
    # Given make dev running in the suite's runtime, and RUNTIME= naming the other one
    other = "inprocess" if PRODUCT_RUNTIME == "lambda" else "lambda"
    if other == "lambda" and not (BUILD_DIR / "ToolWorker").is_dir() and not os.environ.get("CI"):
        pytest.skip(f"RUNTIME=lambda runs the build output, and {BUILD_DIR} has none (make build-local)")
    fixture = EVENTS / "tool_worker" / "healthy-batch.json"

    # When a fixture runs through make invoke with that RUNTIME=
    code = invoke.main(["--runtime", other, "--build-dir", str(BUILD_DIR), "ToolWorker", str(fixture)])
    captured = capsys.readouterr()

    # Then the running stack ran it in the runtime named, without an error
    assert code == 0, captured.out[-3000:] + captured.err[-3000:]
    assert f"running stack ({running_make_dev['lambda']}), {other} runtime" in captured.err, captured.err
    assert "errorType" not in response_of(captured.out)


@MAKE_DEV_GROUP
def test_a_function_url_fixture_in_another_runtime_than_the_running_stack_serves_is_refused(
    running_make_dev, capsys, monkeypatch
):
    monkeypatch.setenv("DEVSTACK_RUNNING_FILE", running_make_dev["file"])
    # Given make dev serving McpServer's Function URL in the suite's runtime
    other = "inprocess" if PRODUCT_RUNTIME == "lambda" else "lambda"
    fixture = EVENTS / "mcp_server" / "function-url-tools-list.json"

    # When the Function URL fixture runs through make invoke with RUNTIME= naming the other runtime
    code = invoke.main(["--runtime", other, "McpServer", str(fixture)])

    # Then it is refused with a clear way out, not answered by a runtime that was not asked for
    assert code == 2
    error = capsys.readouterr().err
    assert f"RUNTIME={other} needs `make dev RUNTIME={other}` or FRESH=1" in error, error


@MAKE_DEV_GROUP
def test_make_env_json_writes_the_running_stacks_value_of_every_declared_variable(local, tmp_path):
    # Given make dev running
    process, _, line = start_make_dev("--runtime", PRODUCT_RUNTIME, "--build-dir", str(BUILD_DIR))
    try:
        if "Lambda runtime is unavailable" in line and not os.environ.get("CI"):
            pytest.skip(line.strip())
        assert "local stack ready" in line, line

        # When the --env-vars file for sam local invoke is written
        output = tmp_path / "sam-env.json"
        result = subprocess.run(
            [sys.executable, "-m", "devstack", "env-json", "--output", str(output)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=120)

    # Then it names every function with exactly the variables its template entry declares (SAM applies the file
    # to those only), each with the running stack's value: resolved names, the local dataset bucket's stack
    assert result.returncode == 0, result.stderr
    variables = json.loads(output.read_text())
    functions = local.stack.functions()
    assert set(variables) == set(functions)
    for logical_id, spec in functions.items():
        assert set(variables[logical_id]) == set(spec.environment), logical_id
    assert variables["ToolWorker"]["JOB_TABLE_NAME"] == local.table_name("JobTable")
