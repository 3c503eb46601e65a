"""The whole template on one machine: moto in server mode, the functions (in-process, or as built
artifacts in Lambda-shaped sandboxes), and the event sources that connect them, all on 127.0.0.1.
`make dev` runs one; the end-to-end tests run one.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import socket
import sys
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import boto3
import httpx
from botocore.config import Config

from devstack.fixture_state import seed
from devstack.front_door_wiring import FunctionUrlSettings, serve_function_urls
from devstack.front_doors.async_invoke import AWS_RETRY_DELAYS, AsyncConfig, AsyncInvoker
from devstack.front_doors.destinations import Destinations
from devstack.front_doors.function_urls import WebFunction
from devstack.front_doors.function_urls import stop as stop_web
from devstack.front_doors.lambda_api import LambdaApi
from devstack.ports import listen_on_each
from devstack.process_environment import ProcessEnvironment
from devstack.runtime.build_output import DEFAULT_BUILD_DIR
from devstack.runtime.durable_functions import LocalDurableFunctions
from devstack.runtime.function_errors import FunctionError
from devstack.runtime.in_process import HandlerImportError
from devstack.runtime.logs import PrefixedStream
from devstack.saved_state import STATE_FILE, restore_state, save_state
from devstack.source_wiring import stream_sources
from devstack.sources.pollers import PollerGate
from devstack.sources.schedules import Schedule, scheduled_event, schedules_of
from devstack.sources.sqs import SqsEventSource
from devstack.sources.streams import StreamEventSource
from devstack.sources.taps import Tap, build_taps, drain_tap
from devstack.sources.write_signal import WriteSignal
from devstack.sqs_extras.move_tasks import MotoServerWithMoveTasks
from devstack.stack.atomic_items import make_item_operations_atomic
from devstack.stack.cognito import ClientCredentialsTokens
from devstack.stack.cognito_login import LocalManagedLogin
from devstack.stack.template import Template, load_template
from devstack.stack.ttl_sweeper import TtlSweeper
from devstack.traces import start_recording, stop_recording
from devstack.wired_stack import LocalEnvironment
from devstack.work_in_flight import WorkInFlight

log = logging.getLogger("devstack")

STREAM_POLL_SECONDS = 0.25  # Lambda polls stream shards about 4 times a second
IDLE_POLL_SECONDS = 10  # with no write to wait for, stream and tap loops still look this often
TTL_SWEEP_SECONDS = 5  # at most one TTL sweep per this many seconds while items are written
MCP_FUNCTION = "McpServer"
CONFORMANCE_APP = "devstack.conformance_fixtures:create_app"
# How long past its function's timeout the stop waits for work under way, and for a loop thread to see the stop.
STOP_GRACE_SECONDS = 5


@dataclass
class DevStackOptions:
    host: str = "127.0.0.1"
    aws_port: int = 4566
    lambda_port: int = 4567
    web_port: int = 4568  # the first Function URL (web-adapter function) served here, the next on +1
    template: Template | None = None
    parameters: dict[str, Any] = field(default_factory=dict)
    state_dir: Path | None = None  # None: a fresh start every time
    retry_delays: tuple[float, ...] = AWS_RETRY_DELAYS
    run_threads: bool = True  # False: the caller drives everything with settle() (tests)
    clock: Callable[[], dt.datetime] = field(default=lambda: dt.datetime.now(dt.UTC))
    # Only the local stack lets fetches and probes reach loopback (no other private address) over plain
    # http: a dev stack on a laptop inside a company network must not be steerable at its hosts.
    function_overrides: dict[str, str] = field(
        default_factory=lambda: {"DATASET_ALLOW_LOOPBACK_HOSTS": "true", "PROBE_ALLOW_LOOPBACK_HOSTS": "true"}
    )
    # "inprocess": functions imported from their source folders; "lambda": the build output in
    # Lambda-shaped sandboxes through the Runtime Interface Client (devstack.runtime.lambda_runtime).
    runtime: str = "inprocess"
    build_dir: Path = DEFAULT_BUILD_DIR
    prewarm: bool = True  # lambda runtime: start one environment per function at start (init errors show)
    # Where spans go when the Tracing parameter is not off (in-process runtime: devstack.traces); None: not kept.
    trace_file: Path | None = None
    # The endpoint also serves the MCP conformance suite's fixtures (devstack.conformance_fixtures; in-process
    # runtime only: the build output has no devstack).
    conformance_fixtures: bool = False


class DevStack:
    def __init__(self, options: DevStackOptions | None = None) -> None:
        self.options = options or DevStackOptions()
        self.template = self.options.template or load_template()
        self.aws_url = f"http://{self.options.host}:{self.options.aws_port}"
        self.lambda_url = f"http://{self.options.host}:{self.options.lambda_port}"
        self.notices: list[str] = []
        self.broken_functions: dict[str, str] = {}
        self._threads: list[threading.Thread] = []  # joined at the stop
        self._recording_spans = False  # devstack.traces: this stack's spans go to options.trace_file
        self._poller_gates: list[PollerGate] = []  # per SQS mapping: one long poll while its queue is idle
        self._deliveries = WorkInFlight()  # SQS pollers' batches: waited for at the stop, not their long polls
        self._stopping = threading.Event()
        self._moto: Any = None
        self._listeners: list[socket.socket] = []  # the AWS, Lambda and first Function URL ports, held from the start
        self._process_environment = ProcessEnvironment()
        self.environment: LocalEnvironment
        self.ttl: TtlSweeper  # DynamoDB's TTL, which moto does not run
        self.stream_sources: dict[str, StreamEventSource] = {}
        self.schedules: dict[str, Schedule] = {}
        self.taps: list[Tap] = []
        self.web_functions: dict[str, WebFunction] = {}  # Function URL logical id -> served app
        self.dev_keys: dict[str, str] = {}  # Function URL logical id -> the key `make dev` issued for it
        self.writes = WriteSignal()

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> DevStack:
        self._listeners = listen_on_each(
            self.options.host, (self.options.aws_port, self.options.lambda_port, self.options.web_port)
        )
        aws_listener, lambda_listener, web_listener = self._listeners
        logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one line per AWS call is noise
        make_item_operations_atomic()
        self._moto = MotoServerWithMoveTasks(aws_listener)
        self._moto.start()
        # Event-source loops wait for a write rather than poll an idle stack (devstack.sources.write_signal).
        self._moto._server.app = self.writes.wrap(self._moto._server.app)
        # moto keeps its state per process: start from nothing, then restore what state_dir holds.
        httpx.post(f"{self.aws_url}/moto-api/reset", timeout=10).raise_for_status()
        self._process_environment.point_at(self.aws_url, self.lambda_url, "us-east-1")
        try:
            self.environment = LocalEnvironment(
                self.client,
                parameters=self.options.parameters,
                template=self.template,
                function_overrides=self.options.function_overrides,
                runtime=self.options.runtime,
                build_dir=self.options.build_dir,
                endpoints={"AWS_ENDPOINT_URL": self.aws_url, "AWS_ENDPOINT_URL_LAMBDA": self.lambda_url},
            )
        except Exception:
            self._moto.stop()  # nothing half-starts
            self._close_listeners()
            self._process_environment.restore()
            raise
        self.notices.extend(self.environment.stack.notices)
        # Before any function is built (the Function URLs' apps included): they decide on tracing when built.
        self._recording_spans = self._start_recording_spans()
        self.environment.seed_datasets()
        self.ttl = TtlSweeper(self.environment.stack, self.client, self.options.clock)
        if self.options.state_dir:
            restore_state(self.options.state_dir / STATE_FILE, self.environment, self.client)
        self.destinations = Destinations(self.client, self._queue_url_for_arn, self._invoke_async_arn)
        self.async_invoker = AsyncInvoker(
            invoke=self.environment.invoke,
            function_arn=lambda logical_id: self.environment.stack.function(logical_id).arn,
            configs=self._async_configs(),
            destinations=self.destinations,
            retry_delays=self.options.retry_delays,
            clock=self.options.clock,
        )
        self.stream_sources = stream_sources(
            self.environment, self.destinations, self.client, self.options.clock, self.ttl.was_ttl_delete, self._notice
        )
        self.schedules = schedules_of(self.environment.stack, self.options.clock, self._notice)
        self.taps.extend(build_taps(self.environment.stack, self.client, self.environment.function_logical_id))
        # Durable functions (DurableConfig) run in the testing SDK's runner, in this process whatever the runtime:
        # the runner hands the handler its checkpoint client as a Python object.
        # None when the template has none (DurableWorker Disabled): nothing is started for them.
        durable_ids = [logical_id for logical_id, spec in self.environment.stack.functions().items() if spec.durable]
        self.durable = (
            LocalDurableFunctions(
                {logical_id: partial(self._invoke_durable, logical_id) for logical_id in durable_ids},
                resolve=self.environment.function_logical_id,
            )
            if durable_ids
            else None
        )
        self.lambda_api = LambdaApi(
            durable=self.durable,
            resolve=self.environment.function_logical_id,
            invoke_sync=self.environment.invoke,
            invoke_async=self.async_invoker.submit,
            fire_schedule=self.fire,
            issue_token=ClientCredentialsTokens(lambda: self.client("cognito-idp"), "us-east-1").issue,
            sam_env_vars=self.sam_env_vars,
            prepare_fixture=self.prepare_fixture,
            runtime=self.options.runtime,
            login=LocalManagedLogin(lambda: self.client("cognito-idp"), self.lambda_url, self.aws_url),
        )
        self.lambda_api.serve(lambda_listener)
        serve_function_urls(
            self.template,
            self.environment,
            FunctionUrlSettings(
                self.options.host,
                web_listener,
                self.options.function_overrides,
                self.aws_url,
                self.lambda_url,
                self._app_factories(),
            ),
            self.web_functions,
            self._notice,
        )
        self._load_functions()  # after the URLs: their functions' environment is final by then
        if self.options.run_threads:
            self._start_threads()
        return self

    def sam_env_vars(self) -> dict[str, dict[str, str]]:
        """An `--env-vars` file for `sam local invoke`: per function, every variable its template entry declares,
        with this stack's value (SAM applies the file only to declared variables; samcli/local/lambdafn/env_vars.py)."""
        return {
            logical_id: {name: spec.environment[name] for name in spec.environment}
            for logical_id, spec in self.environment.stack.functions().items()
        }

    def prepare_fixture(self, state: dict) -> dict[str, str | None]:
        """`make invoke` inside this stack: the fixture's declared state seeded here, and the key this stack
        issued, for a Function URL request that carries none."""
        api_key = next(iter(self.dev_keys.values()), None)
        seed(self.environment, self.web_functions, self.client, state, api_key)
        return {"apiKey": api_key}

    @property
    def stopped(self) -> bool:
        return self._stopping.is_set()

    def stop(self) -> None:
        """Stop taking requests, let the work under way finish, then save: every job acknowledged before the
        stop is in the saved state with its message, and nothing changes the tables after the save."""
        for web in self.web_functions.values():
            stop_web(web)  # no new MCP requests; the ones under way finish (and are answered) first
        self._stopping.set()
        self.writes.notify()  # wake the loops waiting for a write, so they see the stop at once
        for gate in self._poller_gates:
            gate.close()  # SQS pollers waiting for their turn end
        self.async_invoker.close()
        # An SQS poller finishes the batch it is delivering (its deletes included) within its function's timeout;
        # one waiting in a long poll delivers nothing more and is left to end with its poll (a daemon thread).
        # Every invocation under way is waited for within its own function's timeout, and nothing else: an idle
        # stack stops at once.
        self._deliveries.close()
        if not self._deliveries.wait(grace=STOP_GRACE_SECONDS):
            log.warning("an SQS batch was still being delivered when the stop gave up waiting for it")
        if not self.environment.invocations.wait(grace=STOP_GRACE_SECONDS):
            log.warning("a function was still running past its timeout when the stop gave up waiting for it")
        for thread in self._threads:
            thread.join(timeout=STOP_GRACE_SECONDS)  # between invocations, each loop sees the stop at once
        try:
            if self.options.state_dir:
                save_state(self.options.state_dir / STATE_FILE, self.environment, self.client)
        finally:
            if self.durable is not None:
                self.durable.close()
            self.environment.shutdown()
            self.lambda_api.shutdown()
            if self._moto is not None:
                self._moto.stop()
            self._close_listeners()
            self._process_environment.restore()
            if self._recording_spans:
                stop_recording()

    def _invoke_durable(self, logical_id: str, event: Any, _context: Any) -> Any:
        """One invocation of a durable execution, as the local runner makes it."""
        return self.environment.invoke(logical_id, event, runtime="inprocess")

    def _start_recording_spans(self) -> bool:
        """Spans to the trace file when the template's Tracing parameter is not off: the in-process runtime's
        functions share this process's tracer provider; the Lambda runtime's sandboxes have no SDK."""
        mode = str(self.options.parameters.get("Tracing", "off"))
        if mode == "off" or self.options.trace_file is None:
            return False
        if self.options.runtime != "inprocess":
            self._notice("Tracing", f"{mode}: spans are recorded by the in-process runtime only")
            return False
        start_recording(self.options.trace_file, mode)
        return True

    def _close_listeners(self) -> None:
        for listener in self._listeners:
            listener.close()  # the servers answering on them close their own copies

    def client(self, service: str) -> Any:
        # The service is a runtime string; the stubs type clients per literal service name.
        return boto3.client(  # type: ignore[call-overload]
            service,
            endpoint_url=self.lambda_url if service == "lambda" else self.aws_url,
            region_name="us-east-1",
            config=Config(retries={"max_attempts": 2}),
            aws_access_key_id="local",
            aws_secret_access_key="local",  # noqa: S106 - moto accepts any credentials
        )

    # ------------------------------------------------------------------ driving
    def settle(self, rounds: int = 50) -> int:
        """Run every event source until nothing moves (tests). Returns the rounds used."""
        for round_number in range(1, rounds + 1):
            moved = 0
            for source in self.environment.sqs_sources.values():
                outcome = source.poll_once()
                moved += outcome.received
            for stream in self.stream_sources.values():
                stream_outcome = stream.poll_once()
                moved += stream_outcome.invocations + stream_outcome.filtered_out + len(stream_outcome.discarded)
            for tap in self.taps:
                moved += self._drain_tap(tap)
            moved += len(self.async_invoker.run_due())
            if not moved:
                return round_number
        return rounds

    def fire(self, schedule_id: str) -> int:
        """Deliver a schedule's targets now (`make fire SCHEDULE=...`). Returns how many targets fired."""
        schedule = self.schedules.get(schedule_id)
        if schedule is None:
            raise LookupError(f"no schedule {schedule_id}; schedules: {sorted(self.schedules)}")
        for target in schedule.targets:
            self._deliver_target(target, scheduled_event(schedule, self.environment.stack, self.options.clock()))
        return len(schedule.targets)

    def sweep_ttl(self) -> int:
        """Delete items whose TTL attribute has passed, as DynamoDB's TTL process does."""
        return self.ttl.sweep()

    # ------------------------------------------------------------------ wiring
    def _async_configs(self) -> dict[str, AsyncConfig]:
        configs = {}
        for properties in self.environment.stack.active("AWS::Lambda::EventInvokeConfig").values():
            function = self.environment.function_logical_id(str(properties["FunctionName"]))
            configs[function] = AsyncConfig.from_event_invoke_config(properties)
        return configs

    def _drain_tap(self, tap: Tap) -> int:
        return drain_tap(tap, self.client("sqs"), self.async_invoker.submit)

    def _app_factories(self) -> dict[str, str]:
        if not self.options.conformance_fixtures:
            return {}
        if self.options.runtime != "inprocess":
            self._notice(MCP_FUNCTION, "conformance fixtures not served: the lambda runtime runs the build output")
            return {}
        return {MCP_FUNCTION: CONFORMANCE_APP}

    def _load_functions(self) -> None:
        runtime = self.environment.lambda_runtime
        if runtime is not None:
            if self.options.prewarm:
                self.prewarm()
            return
        for logical_id, spec in self.environment.stack.functions().items():
            if spec.handler.endswith(".sh"):
                continue  # a web-adapter function: served on its Function URL instead
            try:
                self.environment.runtime(logical_id).handler()
            except HandlerImportError as error:
                # The stack keeps running; invoking this function reports the same error.
                self.broken_functions[logical_id] = str(error)
                log.error("%s", error)

    def prewarm(self, functions: Iterable[str] | None = None) -> dict[str, str]:
        """Lambda runtime: one environment per function (default: all), started together, so init failures
        show in the banner now rather than on a first invocation. Returns the functions that failed, with why."""
        runtime = self.environment.lambda_runtime
        if runtime is None:
            return {}

        def start(logical_id: str) -> None:
            try:
                with runtime.pool(logical_id).environment():
                    pass
            except FunctionError as error:
                self.broken_functions[logical_id] = f"{logical_id}: {error}"
                log.error("%s failed to initialize: %s", logical_id, error)

        chosen = list(runtime.functions) if functions is None else list(functions)
        threads = [threading.Thread(target=start, args=(logical_id,)) for logical_id in chosen]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return dict(self.broken_functions)

    def _deliver_target(self, target: dict[str, Any], default_event: dict[str, Any]) -> None:
        payload = json.loads(target["Input"]) if target.get("Input") else default_event
        service = target["Arn"].split(":")[2]
        if service == "lambda":
            self.async_invoker.submit(self.environment.function_logical_id(target["Arn"]), payload)
        elif service in ("sqs", "sns", "events"):
            self.destinations.deliver(target["Arn"], payload)
        else:
            log.warning("schedule target %s is not emulated", target["Arn"])

    def _invoke_async_arn(self, arn: str, payload: Any) -> None:
        self.async_invoker.submit(self.environment.function_logical_id(arn), payload)

    def _queue_url_for_arn(self, arn: str) -> str:
        return self.client("sqs").get_queue_url(QueueName=arn.rsplit(":", 1)[-1])["QueueUrl"]

    def _notice(self, logical_id: str, message: str) -> None:
        line = f"{logical_id}: {message}"
        self.notices.append(line)
        log.warning("not emulated: %s", line)

    # ------------------------------------------------------------------ threads
    def _start_threads(self) -> None:
        loops: list[tuple[str, Callable[[], None]]] = []
        for logical_id, source in self.environment.sqs_sources.items():
            # Lambda polls with as many concurrent batches as the function may run (in-process: one).
            pollers = 1
            if self.environment.lambda_runtime is not None:
                pollers = self.environment.concurrency(
                    self.environment.function_logical_id(source.mapping["FunctionName"])
                )
            gate = PollerGate(pollers)
            self._poller_gates.append(gate)
            for poller in range(pollers):
                thread = threading.Thread(
                    target=self._loop,
                    args=(logical_id, lambda s=source, g=gate: self._sqs_step(s, g)),
                    name=f"devstack-{logical_id}-{poller}",
                    daemon=True,
                )
                thread.start()  # not joined at the stop: see self._deliveries
        for logical_id, stream in self.stream_sources.items():
            loops.append((logical_id, partial(self._when_written, stream.poll_once, STREAM_POLL_SECONDS)))
        loops.append(("taps", lambda: self._when_written(lambda: sum(self._drain_tap(t) for t in self.taps), 0.5)))
        loops.append(("async", self._async_step))
        loops.append(("schedules", self._schedule_step))
        loops.append(("ttl", self._ttl_step))
        for name, step in loops:
            thread = threading.Thread(target=self._loop, args=(name, step), name=f"devstack-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def _loop(self, name: str, step: Callable[[], Any]) -> None:
        while not self._stopping.is_set():
            try:
                step()
            except Exception:
                if self._stopping.is_set():
                    return  # the stop closed what the step was using (moto's server, a client)
                log.exception("event source %s failed; retrying", name)
                self._stopping.wait(1)

    def _when_written(
        self, poll: Callable[[], Any], interval: float, idle: Callable[[], float | None] = lambda: IDLE_POLL_SECONDS
    ) -> None:
        """Poll, then wait for the next write to the stack (at most `idle()` seconds, None: no limit), and at
        least `interval` between polls: as often as Lambda polls while busy, rarely while nothing happens."""
        generation = self.writes.generation
        poll()
        if not self._stopping.wait(interval):
            self.writes.wait_after(generation, idle())

    def _sqs_step(self, source: SqsEventSource, gate: PollerGate) -> None:
        """Long-poll the queue when its turn comes, then deliver what came unless the stack began stopping
        meanwhile."""
        if not gate.enter():
            return
        messages: list[dict[str, Any]] = []
        try:
            messages = source.receive(wait=True, on_first=gate.active)
        finally:
            gate.leave(received=bool(messages))
        if not messages:
            return
        function = self.environment.function_logical_id(source.mapping["FunctionName"])
        token = self._deliveries.admit(self.environment.stack.function(function).timeout)
        if token is not None:
            try:
                source.deliver(messages)
            finally:
                self._deliveries.done(token)

    def _ttl_step(self) -> None:
        """Sweep, then sleep until the next item expires or a write may have added one."""
        self._when_written(self.sweep_ttl, TTL_SWEEP_SECONDS, self.ttl.until_next_expiry)

    def _async_step(self) -> None:
        self.async_invoker.run_due()
        self.async_invoker.wait_for_work(self.async_invoker.next_due_in())

    def _schedule_step(self) -> None:
        """Fire what is due, then sleep until the next rate schedule is (a stack without one: until the stop)."""
        self.fire_due()
        now = self.options.clock().timestamp()
        due = [schedule.next_fire for schedule in self.schedules.values() if schedule.period]
        self._stopping.wait(max(0.0, min(due) - now) if due else None)

    def fire_due(self) -> list[str]:
        """Fire every rate schedule whose time has come; returns the ones fired."""
        now = self.options.clock().timestamp()
        fired = []
        for schedule in self.schedules.values():
            if schedule.period and now >= schedule.next_fire:
                schedule.next_fire = now + schedule.period
                self.fire(schedule.logical_id)
                fired.append(schedule.logical_id)
        return fired


def install_log_prefixes() -> None:
    if not isinstance(sys.stdout, PrefixedStream):
        sys.stdout = PrefixedStream(sys.stdout)
