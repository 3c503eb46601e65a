"""The shared handler decorator stack, observed through what it prints."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import time

import pytest
import time_machine

from devstack.runtime.in_process import LocalLambdaContext
from devstack.stack.template import ROOT
from mcp_backend.observability import (
    ToolRunMetrics,
    count_limit_refusal,
    instrumented_handler,
    logger,
    metrics,
    tool_runs,
)


@pytest.fixture
def log_lines():
    """What the shared Logger writes (its handler keeps the stream it was created with)."""
    stream = io.StringIO()
    previous = logger.registered_handler.setStream(stream)
    yield lambda: [json.loads(line) for line in stream.getvalue().splitlines() if line.startswith("{")]
    logger.registered_handler.setStream(previous)


def printed(capfd) -> list[dict]:
    return [json.loads(line) for line in capfd.readouterr().out.splitlines() if line.startswith("{")]


def context() -> LocalLambdaContext:
    return LocalLambdaContext("fn", "arn:aws:lambda:us-east-1:123456789012:function:fn", 128, timeout_seconds=3)


def test_context_keys_and_correlation_id_on_every_line_and_no_state_between_invocations(log_lines):
    # Given a handler that appends a key only on its first invocation
    calls: list[int] = []

    @instrumented_handler(correlation_id_path="Records[0].messageId")
    def handler(event, ctx):
        if not calls:
            logger.append_keys(session="first-only")
        calls.append(1)
        logger.info("working")
        return {"ok": True}

    # When it is invoked twice with secret-bearing events
    handler({"Records": [{"messageId": "m-1", "body": "token=s3cr3t"}]}, context())
    handler({"Records": [{"messageId": "m-2", "body": "token=s3cr3t"}]}, context())

    # Then each line carries the Lambda context and its own correlation id, the first invocation's key is gone,
    # and the event is never logged
    everything = log_lines()
    lines = [line for line in everything if line.get("message") == "working"]
    assert [line["correlation_id"] for line in lines] == ["m-1", "m-2"]
    assert [line.get("session") for line in lines] == ["first-only", None]
    assert all(line["function_name"] == "fn" for line in lines)
    assert "s3cr3t" not in json.dumps(everything)


def test_metrics_flush_with_cold_start_even_when_the_handler_raises(capfd):
    # Given a handler that records a metric and then fails
    @instrumented_handler()
    def handler(event, ctx):
        metrics.add_metric(name="Attempted", unit="Count", value=1)
        raise RuntimeError("boom")

    # When it is invoked
    with pytest.raises(RuntimeError):
        handler({}, context())

    # Then the metric was still emitted as EMF
    blobs = [line for line in printed(capfd) if "_aws" in line]
    assert any("Attempted" in blob for blob in blobs)


def test_a_refused_limit_is_a_metric_by_limit_and_tier_and_a_log_line_naming_the_principal(capfd, log_lines):
    # When a free-tier principal is refused for its daily jobs
    count_limit_refusal("daily_jobs", "free", "user-alice", "resets at 2026-12-02T00:00:00Z")

    # Then one LimitRefused metric is emitted whose dimensions are the limit and the tier, never the principal
    [blob] = [line for line in printed(capfd) if "_aws" in line]
    [directive] = blob["_aws"]["CloudWatchMetrics"]
    assert [metric["Name"] for metric in directive["Metrics"]] == ["LimitRefused"]
    assert (blob["Limit"], blob["Tier"], blob["LimitRefused"]) == ("daily_jobs", "free", [1.0])
    assert "user-alice" not in json.dumps(directive["Dimensions"]) + json.dumps(blob)
    # And the log line says who, which limit and when it resets
    [line] = [line for line in log_lines() if line["message"] == "limit refused"]
    assert (line["principal"], line["limit"], line["tier"]) == ("user-alice", "daily_jobs", "free")


def test_every_flushed_metric_blob_carries_exactly_one_service_dimension(capfd):
    # Given a handler that runs one tool (its own blob) and records a handler-wide metric (the final blob)
    @instrumented_handler()
    def handler(event, ctx):
        with tool_runs.run("analyze_dataset"):
            pass
        metrics.add_metric(name="Handled", unit="Count", value=1)

    # When it is invoked
    handler({}, context())

    # Then each EMF blob declares the service once (each dimension combination is a metric CloudWatch bills),
    # next to the environment
    blobs = [line for line in printed(capfd) if "_aws" in line]
    assert {"ToolInvocation", "Handled"} <= {name for blob in blobs for name in blob if name[0].isupper()}
    for blob in blobs:
        for dimension_set in blob["_aws"]["CloudWatchMetrics"][0]["Dimensions"]:
            assert [name for name in dimension_set if name.lower() == "service"] == ["service"], dimension_set
        assert blob["service"] == "mcp-backend"


def tool_blobs(capfd) -> list[dict]:
    return [blob for blob in printed(capfd) if "ToolInvocation" in blob]


def test_runs_within_the_interval_share_one_blob_per_tool_with_a_value_per_run(capfd):
    # Given tool-run metrics that write once a minute
    runs = ToolRunMetrics(interval_seconds=60)
    before_first_run = time.time()

    # When get_job runs three times (once failing) and list_endpoints once
    for fails in (False, True, False):
        with contextlib.suppress(RuntimeError), runs.run("get_job"):
            if fails:
                raise RuntimeError("boom")
    with runs.run("list_endpoints"):
        pass
    written_before_flush = tool_blobs(capfd)
    runs.flush()

    # Then nothing was written while the runs were under way, and the flush wrote one blob per tool: the runs and
    # their outcomes counted, a duration per run, ToolName its dimension, stamped with the oldest run
    assert written_before_flush == []
    blobs = {blob["ToolName"]: blob for blob in tool_blobs(capfd)}
    assert set(blobs) == {"get_job", "list_endpoints"}
    get_job = blobs["get_job"]
    assert (get_job["ToolInvocation"], get_job["ToolSuccess"], get_job["ToolError"]) == ([3.0], [2.0], [1.0])
    assert len(get_job["ToolDuration"]) == 3
    assert "ToolName" in get_job["_aws"]["CloudWatchMetrics"][0]["Dimensions"][0]
    assert before_first_run * 1000 - 1 <= get_job["_aws"]["Timestamp"] <= time.time() * 1000
    assert (blobs["list_endpoints"]["ToolInvocation"], "ToolError" in blobs["list_endpoints"]) == ([1.0], False)


def test_runs_an_interval_old_are_written_by_the_next_check_and_a_busy_tool_in_blobs_of_at_most_fifty(capfd):
    # Given tool-run metrics that write every 10 seconds, and one run
    runs = ToolRunMetrics(interval_seconds=10)
    with time_machine.travel(time.time(), tick=False) as clock:
        with runs.run("get_job"):
            pass

        # When a request ends at once, and again 11 seconds later
        runs.flush_if_due()
        at_once = tool_blobs(capfd)
        clock.shift(11)
        runs.flush_if_due()
        later = tool_blobs(capfd)

        # And a tool then runs 120 times within the interval
        for _ in range(120):
            with runs.run("get_job"):
                pass
        busy = tool_blobs(capfd)
        runs.flush()
        busy += tool_blobs(capfd)

    # Then the run was written by the later check only, and the 120 runs went out in blobs of at most 50
    assert at_once == []
    assert [blob["ToolInvocation"] for blob in later] == [[1.0]]
    sizes = [(blob["ToolInvocation"], len(blob["ToolDuration"])) for blob in busy]
    assert sizes == [([50.0], 50), ([50.0], 50), ([20.0], 20)]


def test_what_a_flush_writes_has_left_the_process_when_it_returns():
    # Given a process whose stdout is a pipe (as on Lambda, where it is block-buffered), with a pending tool run
    probe = (
        "import os\n"
        "from mcp_backend.observability import tool_runs\n"
        "with tool_runs.run('get_job'):\n"
        "    pass\n"
        "tool_runs.flush()\n"
        "os._exit(0)\n"  # killed right after, as Lambda does once the shutdown's time is up: no exit-time flush
    )
    environment = {
        "PATH": os.environ["PATH"],
        "PYTHONPATH": str(ROOT / "layers" / "shared"),
        "POWERTOOLS_METRICS_NAMESPACE": "MCPServer",  # every function has it (Globals)
    }

    # When the runs are flushed and the process ends at once
    out = subprocess.run([sys.executable, "-c", probe], env=environment, capture_output=True, text=True, timeout=60)

    # Then the blob reached the pipe
    assert out.returncode == 0, out.stderr[-2000:]
    blobs = [json.loads(line) for line in out.stdout.splitlines() if line.startswith('{"_aws"')]
    assert [blob["ToolInvocation"] for blob in blobs] == [[1.0]]


def test_a_stream_set_and_restored_leaves_the_handler_following_sys_stdout(capsys):
    # Given the shared Logger's handler, pinned to a stream and restored with what setStream returned
    handler = logger.registered_handler
    previous = handler.setStream(io.StringIO())
    handler.setStream(previous)

    # When sys.stdout is swapped afterwards (pytest's capture, the local stack's in-process runtime) and a line
    # is logged
    swapped = io.StringIO()
    real = sys.stdout
    sys.stdout = swapped
    try:
        logger.warning("after the restore")
    finally:
        sys.stdout = real

    # Then the line went to the stdout of the moment, not to the one current when the stream was set
    assert "after the restore" in swapped.getvalue()
