"""The units of work the cost model prices, each driven through the local stack (the product template with its
default parameters, functions in-process, moto in server mode on loopback) and counted by `RequestCounter`.

Each unit runs once unmeasured first (cold caches: the API-key secret, clients), then `repetitions` times
measured; the figures are per unit. The stack is driven with `settle()`, so everything a unit sets off
downstream (the call-log consumer, the worker, the probe pipeline) is part of its count.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from devstack.__main__ import issue_dev_keys
from devstack.server import DevStack, DevStackOptions
from devstack.sources.sqs import LONG_POLL_SECONDS
from devstack.wired_stack import local_dataset_url
from tests.bench.stock_app import create_app as create_probe_target
from tests.cost.counting import RequestCounter, RequestLog
from tests.cost.figures import Measurement, UnitFigures
from tests.e2e.conftest import free_port, serve

MCP_FUNCTION = "McpServer"  # the web-adapter function behind the Function URL: one invocation per HTTP request
# A sample the stack uploads at start under the dev key's own prefix (datasets are readable per tenant only).
DATASET_URL = local_dataset_url("apikey:dev-user", "sales.csv")
PROBE_SCHEDULE = "ProbeSchedule"  # the EventBridge rule that triggers ProbeDispatcher
_RATE = re.compile(r"^rate\((\d+)\s+(minute|hour|day)s?\)$")
_UNIT_SECONDS = {"minute": 60, "hour": 3600, "day": 86400}


class CountedDevStack(DevStack):
    """The local stack, with the clients it uses to play AWS services marked as platform clients."""

    def __init__(self, options: DevStackOptions, counter: RequestCounter) -> None:
        super().__init__(options)
        self.counter = counter

    def client(self, service: str) -> Any:
        return self.counter.platform(super().client(service))


class LogVolume(io.TextIOBase):
    """Stdout while the stack runs, counting the bytes written to it and keeping none: what the functions log is
    what CloudWatch Logs ingests. Installed before the stack starts, so the functions' loggers (which keep the
    stream they found) write to it."""

    def __init__(self) -> None:
        self.bytes = 0

    def write(self, text: str) -> int:
        self.bytes += len(text.encode())
        return len(text)

    def take(self) -> int:
        taken, self.bytes = self.bytes, 0
        return taken


class CostStack:
    def __init__(self, stack: CountedDevStack, counter: RequestCounter, log_volume: LogVolume) -> None:
        self.stack = stack
        self.counter = counter
        self.log_volume = log_volume
        [web] = stack.web_functions.values()
        self.url = f"{web.url}/mcp"
        [self.key] = issue_dev_keys(stack).values()
        self._ids = iter(range(1, 1_000_000))
        self.known_job = ""  # the last job run to SUCCEEDED: what the tools/call unit reads

    # ---------------------------------------------------------------- MCP requests, one invocation each
    def mcp(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        body = {"jsonrpc": "2.0", "id": next(self._ids), "method": method, "params": params or {}}
        headers = {
            "authorization": f"Bearer {self.key}",
            "accept": "application/json, text/event-stream",
            "content-type": "application/json",
        }
        started = time.perf_counter()
        response = httpx.post(self.url, json=body, headers=headers, timeout=30)
        self.counter.log.add_invocation(MCP_FUNCTION, time.perf_counter() - started)
        response.raise_for_status()
        if response.headers["content-type"].startswith("application/json"):
            return response.json()
        [message] = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: ")][-1:]
        return message

    def call_tool(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        answer = self.mcp("tools/call", {"name": name, "arguments": arguments})
        result = answer["result"]
        if result.get("isError"):
            raise AssertionError(f"{name} failed: {result}")
        return result.get("structuredContent", {})

    # ---------------------------------------------------------------- units
    def tools_list(self) -> None:
        tools = self.mcp("tools/list")["result"]["tools"]
        assert tools, "tools/list answered no tools"
        self.stack.settle()

    def tools_call(self) -> None:
        self.call_tool("get_job", {"job_id": self.known_job})
        self.stack.settle()

    def job(self) -> None:
        job_id = self.call_tool("submit_analysis", {"dataset_url": DATASET_URL})["jobId"]
        self.stack.settle()
        item = self.stack.client("dynamodb").get_item(
            TableName=self.stack.environment.table_name("JobTable"), Key={"jobId": {"S": job_id}}
        )["Item"]
        assert item["status"]["S"] == "SUCCEEDED", item["status"]
        self.known_job = job_id

    def probe_cycle(self) -> None:
        fired = self.stack.fire(PROBE_SCHEDULE)
        assert fired == 1
        self.stack.settle()

    def idle_schedules(self) -> None:
        for logical_id in self.stack.schedules:
            self.stack.fire(logical_id)
        self.stack.settle()

    def register_probe_target(self, url: str) -> None:
        """One endpoint registered through the endpoint's own tool (not part of the probe cycle's count)."""
        self.call_tool("register_endpoint", {"url": url, "name": "probe target"})


def schedule_firings_per_hour(stack: DevStack) -> float:
    """Firings per hour of the stack's rate schedules, from their expressions (cron ones are not counted)."""
    total = 0.0
    for schedule in stack.schedules.values():
        match = _RATE.match(schedule.expression.strip())
        if match:
            total += 3600 / (int(match.group(1)) * _UNIT_SECONDS[match.group(2)])
    return total


def idle_long_polls_per_hour(stack: DevStack) -> float:
    """Empty long polls an idle account pays for: one poller per SQS mapping, each a 20 s ReceiveMessage, as the
    local stack polls (AWS's pollers per mapping are its own business and may be more)."""
    return len(stack.environment.sqs_sources) * 3600 / LONG_POLL_SECONDS


@contextmanager
def cost_stack(
    log_volume: LogVolume, parameters: dict[str, Any], trace_file: Path | None = None
) -> Iterator[CostStack]:
    counter = RequestCounter()
    options = DevStackOptions(
        aws_port=free_port(),
        lambda_port=free_port(),
        web_port=free_port(),
        parameters=parameters,
        run_threads=False,
        retry_delays=(0.0,),
        trace_file=trace_file,
    )
    # ToolWorker runs each tool in-thread here, not in a forked child: the child makes the same requests, but the
    # counter counts in this process.
    options.function_overrides["TOOL_RUNS_APART"] = "false"
    stack = CountedDevStack(options, counter)
    with counter.counting():
        stack.start()
        try:
            yield CostStack(stack, counter, log_volume)
        finally:
            stack.stop()


UNITS: dict[str, str] = {
    "tools/list": "one tools/list request to the MCP endpoint",
    "tools/call": "one tools/call of get_job (a DynamoDB read) to the MCP endpoint",
    "job": "one submit_analysis tools/call, the job run by ToolWorker to SUCCEEDED",
    "probe": "one probe cycle: the schedule fires, one registered endpoint is probed and its result recorded",
    "idle schedule": "every schedule fires once with nothing registered",
}


# Resources with a monthly charge of their own, counted as the stack created them (conditions applied).
MONTHLY_RESOURCES = (
    "AWS::Kinesis::Stream",
    "AWS::SecretsManager::Secret",
    "AWS::KMS::Key",
    "AWS::CloudWatch::Alarm",
    "AWS::CloudWatch::Dashboard",
)


def measure(repetitions: int, parameters: dict[str, Any] | None = None) -> Measurement:
    """Every unit of work, counted on a fresh local stack (the template's defaults, or these parameters). The
    functions' loggers keep the level they were imported with: one set of parameters per process."""
    volume = LogVolume()
    figures: dict[str, UnitFigures] = {}
    with contextlib.redirect_stdout(volume), cost_stack(volume, parameters or {}) as stack:
        steps: dict[str, Callable[[], None]] = {
            "idle schedule": stack.idle_schedules,  # first: nothing registered yet
            "job": stack.job,
            "tools/list": stack.tools_list,
            "tools/call": stack.tools_call,
        }
        for name, step in steps.items():
            figures[name] = _measure(name, step, repetitions, stack)
        figures["idle schedule"].per_hour = schedule_firings_per_hour(stack.stack)
        with probe_target(stack):
            figures["probe"] = _measure("probe", stack.probe_cycle, repetitions, stack)
        local = stack.stack.environment.stack
        return Measurement(
            units={name: figures[name] for name in UNITS},
            memory_mb={logical_id: spec.memory_size for logical_id, spec in local.functions().items()},
            resources={kind: len(local.active(kind)) for kind in MONTHLY_RESOURCES},
            parameters=dict(local.scope.parameters),
            idle_long_polls_per_hour=idle_long_polls_per_hour(stack.stack),
            log_retention_days=sorted(
                int(group.get("RetentionInDays", 0)) for group in local.active("AWS::Logs::LogGroup").values()
            ),
            repetitions=repetitions,
        )


@contextmanager
def probe_target(stack: CostStack) -> Iterator[None]:
    """An MCP server on loopback (the stock SDK app), registered as the endpoint the probe unit probes."""
    target, thread, port = serve(create_probe_target())
    try:
        stack.register_probe_target(f"http://127.0.0.1:{port}/mcp")
        yield
    finally:
        target.should_exit = True
        thread.join(timeout=10)


def span_volume(repetitions: int) -> dict[str, dict[str, float]]:
    """Each unit's spans with Tracing=otlp and every trace sampled (the local stack records them all): how many,
    and their bytes as the stack writes them (JSON, about their OTLP/JSON size), per unit."""
    with tempfile.TemporaryDirectory() as folder:
        trace_file = Path(folder) / "traces.jsonl"
        volume = LogVolume()
        with contextlib.redirect_stdout(volume), cost_stack(volume, {"Tracing": "otlp"}, trace_file) as stack:
            steps = {
                "idle schedule": stack.idle_schedules,
                "job": stack.job,
                "tools/list": stack.tools_list,
                "tools/call": stack.tools_call,
            }
            found = {name: _spans(step, repetitions, trace_file) for name, step in steps.items()}
            with probe_target(stack):
                found["probe"] = _spans(stack.probe_cycle, repetitions, trace_file)
    return found


def _spans(step: Callable[[], None], repetitions: int, trace_file: Path) -> dict[str, float]:
    step()  # cold, as the units are counted
    before = _lines(trace_file)
    for _ in range(repetitions):
        step()
    written = _lines(trace_file)[len(before) :]
    return {"spans": len(written) / repetitions, "bytes": sum(len(line) for line in written) / repetitions}


def _lines(trace_file: Path) -> list[str]:
    return trace_file.read_text().splitlines() if trace_file.exists() else []


def _measure(name: str, step: Callable[[], None], repetitions: int, stack: CostStack) -> UnitFigures:
    step()  # cold: caches fill, clients are built
    stack.counter.reset()
    stack.log_volume.take()
    for _ in range(repetitions):
        step()
    log: RequestLog = stack.counter.reset()
    return UnitFigures(
        name=name,
        description=UNITS[name],
        requests={key: count / repetitions for key, count in sorted(log.requests.items())},
        kinesis_records=log.kinesis_records / repetitions,
        kinesis_bytes=log.kinesis_bytes / repetitions,
        invocations={key: count / repetitions for key, count in sorted(log.invocations.items())},
        median_ms={key: sorted(values)[len(values) // 2] * 1000 for key, values in sorted(log.durations.items())},
        log_bytes=stack.log_volume.take() / repetitions,
        dynamodb_batch_items=log.dynamodb_batch_items / repetitions,
        dynamodb_transaction_items=log.dynamodb_transaction_items / repetitions,
        dynamodb_items_written=log.dynamodb_items_written / repetitions,
        dynamodb_write_units=log.dynamodb_write_units / repetitions,
        kinesis_bytes_read=log.kinesis_bytes_read / repetitions,
    )
