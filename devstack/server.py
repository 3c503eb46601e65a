"""The whole template on one machine: moto in server mode, the functions (in-process, or as built
artifacts in Lambda-shaped sandboxes), and the event sources that connect them, all on 127.0.0.1.
`make dev` runs one; the end-to-end tests run one.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
import os
import re
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import boto3
import httpx
from botocore.config import Config

from devstack.front_doors.async_invoke import AWS_RETRY_DELAYS, AsyncConfig, AsyncInvoker
from devstack.front_doors.destinations import Destinations
from devstack.front_doors.function_urls import NotAWebFunction, WebFunction
from devstack.front_doors.function_urls import serve as serve_web
from devstack.front_doors.function_urls import stop as stop_web
from devstack.front_doors.lambda_api import LambdaApi
from devstack.front_doors.web_adapter import serve_function_url
from devstack.runtime.build_output import DEFAULT_BUILD_DIR
from devstack.runtime.function_errors import FunctionError
from devstack.runtime.in_process import HandlerImportError
from devstack.runtime.lambda_runtime import LambdaRuntime
from devstack.runtime.logs import PrefixedStream
from devstack.sources.batches_in_delivery import Deliveries
from devstack.sources.pollers import PollerGate
from devstack.sources.sqs import SqsEventSource
from devstack.sources.streams import DynamoDBStreamEventSource, KinesisEventSource, StreamEventSource
from devstack.sources.write_signal import WriteSignal
from devstack.sqs_extras.move_tasks import MotoServerWithMoveTasks
from devstack.sqs_extras.queue_state import restore_messages, saved_messages
from devstack.stack.atomic_items import make_item_operations_atomic
from devstack.stack.cognito import ClientCredentialsTokens
from devstack.stack.intrinsics import Unsupported
from devstack.stack.template import Template, load_template
from devstack.wired_stack import LocalEnvironment

log = logging.getLogger("devstack")

LOCAL_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local", "AWS_SESSION_TOKEN": "local"}
_STACK_ENVIRON = (*LOCAL_CREDENTIALS, "AWS_DEFAULT_REGION", "AWS_REGION", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_LAMBDA")
STATE_VERSION = 2  # state.json: messages with their SQS bookkeeping (1: bodies only)
ACCOUNT_ID, REGION = "123456789012", "us-east-1"  # moto's default account; the stack's one region
STREAM_POLL_SECONDS = 0.25  # Lambda polls stream shards about 4 times a second
IDLE_POLL_SECONDS = 10  # with no write to wait for, stream and tap loops still look this often
TTL_SWEEP_SECONDS = 5  # at most one TTL sweep per this many seconds while items are written
_RATE = re.compile(r"^rate\((\d+)\s+(minute|minutes|hour|hours|day|days)\)$")
_UNIT_SECONDS = {"minute": 60, "hour": 3600, "day": 86400}


_COMMON_MAPPING_PROPERTIES = {
    "FunctionName", "EventSourceArn", "BatchSize", "MaximumBatchingWindowInSeconds", "FunctionResponseTypes",
    "FilterCriteria", "Enabled",
}  # fmt: skip
_STREAM_MAPPING_PROPERTIES = _COMMON_MAPPING_PROPERTIES | {
    "StartingPosition", "StartingPositionTimestamp", "BisectBatchOnFunctionError", "MaximumRetryAttempts",
    "MaximumRecordAgeInSeconds", "DestinationConfig", "ParallelizationFactor",
}  # fmt: skip
_EMULATED_MAPPING_PROPERTIES = {
    "sqs": _COMMON_MAPPING_PROPERTIES | {"ScalingConfig"},  # concurrency limits are not emulated (README)
    "kinesis": _STREAM_MAPPING_PROPERTIES,
    "dynamodb": _STREAM_MAPPING_PROPERTIES,
}


class PortInUse(Exception):
    pass


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


@dataclass
class Schedule:
    logical_id: str
    expression: str
    targets: list[dict[str, Any]]
    period: float | None  # None: cron, fired only on demand
    next_fire: float = 0.0


@dataclass
class Tap:
    """A queue the dev stack subscribes on a function's behalf (SNS -> Lambda, rule -> Lambda)."""

    function: str
    queue_url: str
    kind: str  # "sns" or "events"
    subscription_arn: str = ""


class DevStack:
    def __init__(self, options: DevStackOptions | None = None) -> None:
        self.options = options or DevStackOptions()
        self.template = self.options.template or load_template()
        self.aws_url = f"http://{self.options.host}:{self.options.aws_port}"
        self.lambda_url = f"http://{self.options.host}:{self.options.lambda_port}"
        self.notices: list[str] = []
        self.broken_functions: dict[str, str] = {}
        self._threads: list[threading.Thread] = []  # joined at the stop
        self._poller_gates: list[PollerGate] = []  # per SQS mapping: one long poll while its queue is idle
        self._deliveries = Deliveries()  # SQS pollers' batches: waited for at the stop, not their long polls
        self._next_ttl_expiry: float | None = None  # the earliest TTL still in the future, as of the last sweep
        self._stopping = threading.Event()
        self._moto: Any = None
        self._saved_environ: dict[str, str | None] = {}
        self._ttl_deleted: set[str] = set()
        self._ttl_lock = threading.Lock()
        self.environment: LocalEnvironment
        self.stream_sources: dict[str, StreamEventSource] = {}
        self.schedules: dict[str, Schedule] = {}
        self.taps: list[Tap] = []
        self.web_functions: dict[str, WebFunction] = {}  # Function URL logical id -> served app
        self.writes = WriteSignal()

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> DevStack:
        for port in (self.options.aws_port, self.options.lambda_port, self.options.web_port):
            _require_free(self.options.host, port)
        logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one line per AWS call is noise
        make_item_operations_atomic()
        self._moto = MotoServerWithMoveTasks(ip_address=self.options.host, port=self.options.aws_port, verbose=False)
        self._moto.start()
        # Event-source loops wait for a write rather than poll an idle stack (devstack.sources.write_signal).
        self._moto._server.app = self.writes.wrap(self._moto._server.app)
        # moto keeps its state per process: start from nothing, then restore what state_dir holds.
        httpx.post(f"{self.aws_url}/moto-api/reset", timeout=10).raise_for_status()
        self._saved_environ = {name: os.environ.get(name) for name in _STACK_ENVIRON}
        os.environ.update(
            {
                **LOCAL_CREDENTIALS,
                "AWS_DEFAULT_REGION": "us-east-1",
                "AWS_REGION": "us-east-1",
                "AWS_ENDPOINT_URL": self.aws_url,
                "AWS_ENDPOINT_URL_LAMBDA": self.lambda_url,
            }
        )
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
            self._restore_environ()
            raise
        self.notices.extend(self.environment.stack.notices)
        self.environment.seed_datasets()
        self._restore_state()
        self.destinations = Destinations(self.client, self._queue_url_for_arn, self._invoke_async_arn)
        self.async_invoker = AsyncInvoker(
            invoke=self.environment.invoke,
            function_arn=lambda logical_id: self.environment.stack.function(logical_id).arn,
            configs=self._async_configs(),
            destinations=self.destinations,
            retry_delays=self.options.retry_delays,
            clock=self.options.clock,
        )
        self._build_stream_sources()
        self._build_schedules()
        self._build_taps()
        self.lambda_api = LambdaApi(
            resolve=self.environment.function_logical_id,
            invoke_sync=self.environment.invoke,
            invoke_async=self.async_invoker.submit,
            fire_schedule=self.fire,
            issue_token=ClientCredentialsTokens(lambda: self.client("cognito-idp"), "us-east-1").issue,
            sam_env_vars=self.sam_env_vars,
        )
        self.lambda_api.serve(self.options.host, self.options.lambda_port)
        self._serve_function_urls()
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
        # An SQS poller finishes the batch it is delivering (its deletes included) within the timeout; one
        # waiting in a long poll delivers nothing more and is left to end with its poll (a daemon thread).
        if not self._deliveries.close(timeout=self._longest_timeout() + 5):
            log.warning("an SQS batch was still being delivered when the stop gave up waiting for it")
        for thread in self._threads:
            thread.join(timeout=self._longest_timeout() + 5)
        try:
            self._save_state()
        finally:
            self.environment.shutdown()
            self.lambda_api.shutdown()
            if self._moto is not None:
                self._moto.stop()
            self._restore_environ()

    def _longest_timeout(self) -> float:
        return max((float(spec.timeout) for spec in self.environment.stack.functions().values()), default=3.0)

    def _restore_environ(self) -> None:
        for name, value in self._saved_environ.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value

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
            self._deliver_target(target, self._scheduled_event(schedule))
        return len(schedule.targets)

    def sweep_ttl(self) -> int:
        """Delete items whose TTL attribute has passed, as DynamoDB's TTL process does."""
        deleted = 0
        now = self.options.clock().timestamp()
        next_expiry: float | None = None
        dynamodb = self.client("dynamodb")
        for logical_id, properties in self.environment.stack.active("AWS::DynamoDB::Table").items():
            ttl = properties.get("TimeToLiveSpecification", {})
            if not ttl.get("Enabled"):
                continue
            table = self.environment.table_name(logical_id)
            keys = [k["AttributeName"] for k in properties["KeySchema"]]
            for page in dynamodb.get_paginator("scan").paginate(TableName=table):
                for item in page["Items"]:
                    expires = item.get(ttl["AttributeName"], {}).get("N")
                    if expires is None:
                        continue
                    if float(expires) > now:
                        next_expiry = min(float(expires), next_expiry or float(expires))
                        continue
                    key = {name: item[name] for name in keys}
                    with self._ttl_lock:
                        self._ttl_deleted.add(_key_id(key))
                    dynamodb.delete_item(TableName=table, Key=key)
                    deleted += 1
        self._next_ttl_expiry = next_expiry
        return deleted

    # ------------------------------------------------------------------ wiring
    def _async_configs(self) -> dict[str, AsyncConfig]:
        configs = {}
        for properties in self.environment.stack.active("AWS::Lambda::EventInvokeConfig").values():
            function = self.environment.function_logical_id(str(properties["FunctionName"]))
            configs[function] = AsyncConfig.from_event_invoke_config(properties)
        return configs

    def _build_stream_sources(self) -> None:
        for logical_id, mapping in self.environment.stack.event_source_mappings().items():
            arn = mapping["EventSourceArn"]
            service = arn.split(":")[2]
            for name in sorted(set(mapping) - _EMULATED_MAPPING_PROPERTIES.get(service, set())):
                self._notice(logical_id, f"property {name} is not emulated (ignored)")
            if int(mapping.get("ParallelizationFactor", 1)) > 1:
                self._notice(logical_id, "ParallelizationFactor > 1: shards are read one batch at a time")
            if service == "sqs":
                continue
            function = self.environment.function_logical_id(str(mapping["FunctionName"]))
            common = {
                "mapping": mapping,
                "function_arn": self.environment.stack.function(function).arn,
                "invoke": lambda event, fid=function: self.environment.invoke(fid, event),
                "destinations": self.destinations,
                "region": "us-east-1",
                "clock": self.options.clock,
            }
            if service == "kinesis":
                self.stream_sources[logical_id] = KinesisEventSource(**common, kinesis_client=self.client("kinesis"))
            elif service == "dynamodb":
                self.stream_sources[logical_id] = DynamoDBStreamEventSource(
                    **common, streams_client=self.client("dynamodbstreams"), ttl_deletes=self._was_ttl_delete
                )
            else:
                self._notice(logical_id, f"event source {service} is not emulated")
        for source in self.stream_sources.values():
            source.start()  # take LATEST positions now, before anything is written

    def _build_schedules(self) -> None:
        stack = self.environment.stack
        for logical_id, rule in stack.active("AWS::Events::Rule").items():
            if "ScheduleExpression" in rule and rule.get("State", "ENABLED") == "ENABLED":
                self._add_schedule(logical_id, rule["ScheduleExpression"], rule.get("Targets", []))
        for logical_id, schedule in stack.active("AWS::Scheduler::Schedule").items():
            if schedule.get("State", "ENABLED") == "ENABLED":
                self._add_schedule(logical_id, schedule["ScheduleExpression"], [schedule["Target"]])

    def _add_schedule(self, logical_id: str, expression: str, targets: list[dict[str, Any]]) -> None:
        match = _RATE.match(expression.strip())
        period = int(match.group(1)) * _UNIT_SECONDS[match.group(2).rstrip("s")] if match else None
        if period is None:
            self._notice(logical_id, f"ScheduleExpression {expression} fires only on demand (`make fire`)")
        first = self.options.clock().timestamp() + (period or 0)
        self.schedules[logical_id] = Schedule(logical_id, expression, targets, period, first)

    def _build_taps(self) -> None:
        sqs, sns, events = self.client("sqs"), self.client("sns"), self.client("events")
        stack = self.environment.stack
        for logical_id, subscription in stack.active("AWS::SNS::Subscription").items():
            if subscription["Protocol"] != "lambda":
                continue
            tap = self._tap_queue(f"sns-{logical_id}", self.environment.function_logical_id(subscription["Endpoint"]))
            attributes = {
                key: json.dumps(subscription[key]) if isinstance(subscription[key], dict) else str(subscription[key])
                for key in ("FilterPolicy", "FilterPolicyScope")
                if key in subscription
            }
            tap.kind = "sns"
            tap.subscription_arn = sns.subscribe(
                TopicArn=subscription["TopicArn"],
                Protocol="sqs",
                Endpoint=_queue_arn(sqs, tap.queue_url),
                Attributes=attributes,
            )["SubscriptionArn"]
        for logical_id, rule in stack.active("AWS::Events::Rule").items():
            if "EventPattern" not in rule:
                continue
            for target in rule.get("Targets", []):
                if target["Arn"].split(":")[2] != "lambda":
                    continue
                tap = self._tap_queue(
                    f"rule-{logical_id}-{target['Id']}", self.environment.function_logical_id(target["Arn"])
                )
                tap.kind = "events"
                events.put_targets(
                    Rule=self.environment.stack.ensure(logical_id).ref,
                    EventBusName=rule.get("EventBusName", "default"),
                    Targets=[
                        {
                            "Id": f"devstack-tap-{target['Id']}",
                            "Arn": _queue_arn(sqs, tap.queue_url),
                            **{k: v for k, v in target.items() if k in ("Input", "InputPath")},
                        }
                    ],
                )

    def _tap_queue(self, name: str, function: str) -> Tap:
        url = self.client("sqs").create_queue(QueueName=f"devstack-tap-{name}"[:80])["QueueUrl"]
        tap = Tap(function=function, queue_url=url, kind="")
        self.taps.append(tap)
        return tap

    def _drain_tap(self, tap: Tap) -> int:
        sqs = self.client("sqs")
        messages = sqs.receive_message(QueueUrl=tap.queue_url, MaxNumberOfMessages=10).get("Messages", [])
        for message in messages:
            body = json.loads(message["Body"])
            payload = _sns_event(body, tap.subscription_arn) if tap.kind == "sns" else body
            self.async_invoker.submit(tap.function, payload)
            sqs.delete_message(QueueUrl=tap.queue_url, ReceiptHandle=message["ReceiptHandle"])
        return len(messages)

    def _serve_function_urls(self) -> None:
        """Serve each Function URL whose function runs a web app behind the Lambda Web Adapter."""
        port = self.options.web_port
        for logical_id, url in self.template.resources("AWS::Lambda::Url").items():
            function = self._url_target(url["Properties"]["TargetFunctionArn"])
            try:
                spec = self.environment.stack.function(function)
                if port != self.options.web_port:
                    _require_free(self.options.host, port)
                host = f"{self.options.host}:{port}"
                # Browser pages on the stack's own loopback origins may call it, besides what the template allows.
                allowed = self.options.function_overrides.get("MCP_ALLOWED_ORIGINS")
                allowed = allowed if allowed is not None else spec.environment.get("MCP_ALLOWED_ORIGINS", "")
                origins = [allowed, f"http://{host}", f"http://localhost:{port}"]
                overrides = {
                    **self.options.function_overrides,
                    # The Function URL host is not known locally; the loopback host stands in for it.
                    "MCP_ALLOWED_HOSTS": f"{host},localhost:{port}",
                    "MCP_ALLOWED_ORIGINS": ",".join(origin for origin in origins if origin),
                    **self._oauth_overrides(spec.environment, f"http://{host}"),
                }
                lambda_runtime = self.environment.lambda_runtime
                if lambda_runtime is not None:
                    web = self._serve_in_lambda_runtime(lambda_runtime, function, port, overrides)
                else:
                    web = serve_web(spec, self.options.host, port, "us-east-1", overrides)
                self.web_functions[logical_id] = web
                self.environment.stack.ensure(logical_id).attributes["FunctionUrl"] = f"{web.url}/"
                port += 1
            except (NotAWebFunction, Unsupported, LookupError) as reason:
                self._notice(logical_id, f"Function URL not served: {reason}")

    def _oauth_overrides(self, environment: dict[str, str], url: str) -> dict[str, str]:
        """OAuth mode: this URL is the resource, and a created pool's JWKS is moto's (same keys, served locally)."""
        if environment.get("AUTH_MODE", "apikey") == "apikey":
            return {}
        overrides = {} if environment.get("OAUTH_RESOURCE") else {"OAUTH_RESOURCE": f"{url}/mcp"}
        jwks = environment.get("OAUTH_JWKS_URL", "")
        cognito = "https://cognito-idp.us-east-1.amazonaws.com/"
        if jwks.startswith(cognito):
            overrides["OAUTH_JWKS_URL"] = f"{self.aws_url}/{jwks.removeprefix(cognito)}"
        return overrides

    def _serve_in_lambda_runtime(
        self, runtime: LambdaRuntime, function: str, port: int, overrides: dict[str, str]
    ) -> WebFunction:
        lambda_function = runtime.functions[function]
        if not lambda_function.exec_wrapper:
            raise NotAWebFunction(f"{function} has no AWS_LAMBDA_EXEC_WRAPPER (a Function URL event handler)")
        runtime.functions[function] = dataclasses.replace(
            lambda_function, environment={**lambda_function.environment, **overrides}
        )
        return serve_function_url(runtime.pool(function), self.options.host, port)

    def _url_target(self, expression: Any) -> str:
        """Logical id of the function behind a Function URL's TargetFunctionArn (function or alias)."""
        target = expression.get("Ref") or expression.get("Fn::GetAtt", [""])[0]
        resource = self.template.resources().get(target, {})
        if resource.get("Type") == "AWS::Lambda::Alias":
            function = resource["Properties"]["FunctionName"]
            return function.get("Ref") or function.get("Fn::GetAtt", [""])[0]
        return target

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

    def _scheduled_event(self, schedule: Schedule) -> dict[str, Any]:
        return {
            "version": "0",
            "id": f"{schedule.logical_id}-{time.time_ns()}",
            "detail-type": "Scheduled Event",
            "source": "aws.events",
            "account": "123456789012",
            "time": self.options.clock().strftime("%Y-%m-%dT%H:%M:%SZ"),
            "region": "us-east-1",
            "resources": [self.environment.stack.arn("events", f"rule/{schedule.logical_id}")],
            "detail": {},
        }

    def _invoke_async_arn(self, arn: str, payload: Any) -> None:
        self.async_invoker.submit(self.environment.function_logical_id(arn), payload)

    def _queue_url_for_arn(self, arn: str) -> str:
        return self.client("sqs").get_queue_url(QueueName=arn.rsplit(":", 1)[-1])["QueueUrl"]

    def _was_ttl_delete(self, keys: dict[str, Any]) -> bool:
        # Kept, not consumed: every mapping on the stream reads the same REMOVE record.
        with self._ttl_lock:
            return _key_id(keys) in self._ttl_deleted

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
        if messages and self._deliveries.admit():
            try:
                source.deliver(messages)
            finally:
                self._deliveries.done()

    def _ttl_step(self) -> None:
        """Sweep, then sleep until the next item expires or a write may have added one."""
        self._when_written(self.sweep_ttl, TTL_SWEEP_SECONDS, self._until_next_expiry)

    def _until_next_expiry(self) -> float | None:
        expiry = self._next_ttl_expiry
        return None if expiry is None else max(0.0, expiry - self.options.clock().timestamp())

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

    # ------------------------------------------------------------------ state kept between runs
    def _state_file(self) -> Path | None:
        return self.options.state_dir / "state.json" if self.options.state_dir else None

    def _save_state(self) -> None:
        path = self._state_file()
        if path is None:
            return
        dynamodb = self.client("dynamodb")
        state: dict[str, Any] = {"version": STATE_VERSION, "tables": {}, "queues": {}}
        for logical_id in self.environment.stack.active("AWS::DynamoDB::Table"):
            items = []
            for page in dynamodb.get_paginator("scan").paginate(
                TableName=self.environment.table_name(logical_id), ConsistentRead=True
            ):
                items.extend(page["Items"])
            state["tables"][logical_id] = items
        for logical_id in self.environment.stack.active("AWS::SQS::Queue"):
            state["queues"][logical_id] = saved_messages(ACCOUNT_ID, REGION, self._queue_name(logical_id))
        path.parent.mkdir(parents=True, exist_ok=True)
        # Written aside and renamed: a stop cut short leaves the previous state, never half of one.
        partial = path.with_suffix(".json.partial")
        partial.write_text(json.dumps(state))
        os.replace(partial, path)

    def _restore_state(self) -> None:
        path = self._state_file()
        if path is None or not path.exists():
            return
        state = json.loads(path.read_text())
        dynamodb, sqs = self.client("dynamodb"), self.client("sqs")
        for logical_id, items in state.get("tables", {}).items():
            for item in items:
                dynamodb.put_item(TableName=self.environment.table_name(logical_id), Item=item)
        for logical_id, messages in state.get("queues", {}).items():
            if state.get("version") == STATE_VERSION:
                restore_messages(ACCOUNT_ID, REGION, self._queue_name(logical_id), messages)
            else:  # a state file of an older stack kept bodies only: they come back as new messages
                for body in messages:
                    sqs.send_message(QueueUrl=self.environment.queue_url(logical_id), MessageBody=body)

    def _queue_name(self, logical_id: str) -> str:
        return self.environment.queue_url(logical_id).rsplit("/", 1)[-1]


def _require_free(host: str, port: int) -> None:
    """Refuse a port another socket listens on. Connections of a stack stopped a moment ago linger in
    TIME_WAIT for about a minute; like the servers themselves (SO_REUSEADDR), the probe binds through them."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            raise PortInUse(f"port {port} on {host} is already in use; pass another with PORT=... ") from None


def _key_id(keys: dict[str, Any]) -> str:
    return json.dumps(keys, sort_keys=True)


def _queue_arn(sqs: Any, url: str) -> str:
    return sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]


def _sns_event(notification: dict[str, Any], subscription_arn: str) -> dict[str, Any]:
    """The SNS notification an SQS tap received, in the shape SNS gives a Lambda subscriber."""
    return {
        "Records": [
            {
                "EventSource": "aws:sns",
                "EventVersion": "1.0",
                "EventSubscriptionArn": subscription_arn,
                "Sns": {
                    "Type": notification.get("Type", "Notification"),
                    "MessageId": notification["MessageId"],
                    "TopicArn": notification["TopicArn"],
                    "Subject": notification.get("Subject"),
                    "Message": notification["Message"],
                    "Timestamp": notification["Timestamp"],
                    "SignatureVersion": notification.get("SignatureVersion", "1"),
                    "Signature": notification.get("Signature", ""),
                    "SigningCertUrl": notification.get("SigningCertURL", ""),
                    "UnsubscribeUrl": notification.get("UnsubscribeURL", ""),
                    "MessageAttributes": notification.get("MessageAttributes", {}),
                },
            }
        ]
    }


def install_log_prefixes() -> None:
    if not isinstance(sys.stdout, PrefixedStream):
        sys.stdout = PrefixedStream(sys.stdout)
