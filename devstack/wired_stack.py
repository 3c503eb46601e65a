"""The local stack wired together: resources from the template, functions, event sources.

Functions run in one of two runtimes:
- "inprocess": imported from their source folders into this process (fast, any OS);
- "lambda": the built artifacts, each execution environment a Lambda-shaped sandbox driven through
  AWS's Runtime Interface Client (devstack.runtime.lambda_runtime).
Tests, `make invoke` and `make dev` all build one of these; none of them re-declares a resource.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import cache, cached_property, partial
from pathlib import Path
from typing import Any
from urllib.parse import quote

from devstack.runtime.build_output import DEFAULT_BUILD_DIR, check_build, layer_dirs_for
from devstack.runtime.execution_environment import LambdaFunction
from devstack.runtime.in_process import FunctionRuntime
from devstack.runtime.lambda_runtime import DEFAULT_CONCURRENCY, LambdaRuntime
from devstack.runtime.runtime_image import host_architecture, prepare_runtime_image
from devstack.sources.sqs import SqsEventSource
from devstack.stack.resources import LocalStack, unqualified
from devstack.stack.template import ROOT, Template
from devstack.work_in_flight import WorkInFlight

# Sample datasets for analyze_dataset jobs: events/datasets/* is uploaded to this bucket (the stack's
# DatasetBucketName), under the prefix of each user the local stack's keys, fixtures and tests act as: a tenant
# reads only its own prefix. Callers of the MCP endpoint are namespaced ("apikey:user-alice"); job fixtures name
# their user directly.
DATASET_BUCKET = "local-datasets"
DATASET_DIR = ROOT / "events" / "datasets"
DATASET_OWNERS = (
    *("user-alice", "user-bob", "user-e2e", "dev-user"),
    *("apikey:user-alice", "apikey:user-bob", "apikey:dev-user"),
)


# Preparing the image runs uv and the interpreter several times (a second or more); what it depends on (uv.lock,
# the bootstrap files, the interpreter) stays put while a process runs, so each process prepares it once.
runtime_image = cache(prepare_runtime_image)


def dataset_prefix(owner: str) -> str:
    """The owner's key prefix, by the rule mcp_backend.tools.dataset_access applies (percent-encoded, so
    "apikey:user-alice" is "apikey%3Auser-alice/"); a unit test holds the two equal."""
    return quote(owner, safe="") + "/"


def local_dataset_url(owner: str, name: str) -> str:
    """The s3:// URL of a sample dataset as `owner` reads it."""
    return f"s3://{DATASET_BUCKET}/{dataset_prefix(owner)}{name}"


# In-process, a function shares its process with the emulated AWS (moto) and the stack's own threads: a fork there
# copies locks those threads may hold and moto's state, so a forked tool run could hang or read a stale copy.
# ToolWorker runs each tool in its record's thread here; the Lambda-shaped runtime (a process per environment,
# AWS over HTTP) forks as Lambda does. A test of the fork path sets TOOL_RUNS_APART=true in function_overrides.
IN_PROCESS_DEFAULTS = {"TOOL_RUNS_APART": "false"}


class LocalEnvironment:
    def __init__(
        self,
        client_factory: Callable[[str], Any],
        parameters: dict[str, Any] | None = None,
        template: Template | None = None,
        function_overrides: dict[str, str] | None = None,
        runtime: str = "inprocess",
        build_dir: Path = DEFAULT_BUILD_DIR,
        endpoints: dict[str, str] | None = None,
        on_demand: bool = False,
    ) -> None:
        """on_demand: create the resources that act on others (key aliases, subscriptions, rules) at once and
        every other one when it is first touched (a function's spec, a queue's URL, a table's name, a lookup by
        ARN); a test that touches a few of the template's resources skips creating the rest in moto."""
        # Environment the local stack adds to every function (e.g. allowing loopback datasets).
        self.function_overrides = function_overrides or {}
        parameters = {"DatasetBucketName": DATASET_BUCKET, **(parameters or {})}
        self.stack = LocalStack(client_factory, template=template, parameters=parameters)
        if on_demand:
            self.stack.create_connections()
        else:
            self.stack.create_all()
        self.client = self.stack.client
        self.runtime_mode = runtime
        self._runtimes: dict[str, FunctionRuntime] = {}
        self.lambda_runtime: LambdaRuntime | None = None
        self._build_dir, self._endpoints = build_dir, endpoints or {}
        self._lambda_on_demand: LambdaRuntime | None = None  # an in-process stack's `make invoke RUNTIME=lambda`
        self._on_demand_lock = threading.Lock()  # concurrent invocations start one on-demand runtime
        self.invocations = WorkInFlight()  # every invocation under way, for the stop to wait on
        if runtime == "lambda":
            self.lambda_runtime = self._new_lambda_runtime()
        elif runtime != "inprocess":
            raise ValueError(f"runtime must be inprocess or lambda, not {runtime}")

    # ---------------------------------------------------------------- functions
    def runtime(self, logical_id: str) -> FunctionRuntime:
        if logical_id not in self._runtimes:
            self._runtimes[logical_id] = FunctionRuntime(
                self.stack.function(logical_id), self.stack.region, {**IN_PROCESS_DEFAULTS, **self.function_overrides}
            )
        return self._runtimes[logical_id]

    def invoke(self, logical_id: str, event: Any, runtime: str | None = None) -> Any:
        """Invoke in the stack's runtime, or in the one named (`make invoke RUNTIME=` inside a running stack)."""
        runtime = runtime or self.runtime_mode
        with self.invocations.tracked(self.stack.function(logical_id).timeout):
            return self._invoke(logical_id, event, runtime)

    def _invoke(self, logical_id: str, event: Any, runtime: str) -> Any:
        if runtime == "lambda":
            with self._on_demand_lock:
                if self.lambda_runtime is None and self._lambda_on_demand is None:
                    self._lambda_on_demand = self._new_lambda_runtime()
            lambda_runtime = self.lambda_runtime or self._lambda_on_demand
            assert lambda_runtime is not None
            return lambda_runtime.invoke(logical_id, event)
        if runtime != "inprocess":
            raise ValueError(f"runtime must be inprocess or lambda, not {runtime}")
        return self.runtime(logical_id).invoke(event)

    def _new_lambda_runtime(self) -> LambdaRuntime:
        # The build is checked first: a missing one stops everything before any install.
        check_build(self._build_dir, host_architecture(), self.stack.template.code_paths)
        image = runtime_image()
        return LambdaRuntime(
            {
                logical_id: self._lambda_function(logical_id, self._build_dir, self._endpoints)
                for logical_id in self.stack.functions()
            },
            image,
        )

    def concurrency(self, logical_id: str) -> int:
        """How many environments the function may run at once: its reserved concurrency, else its
        SQS mapping's MaximumConcurrency, else the local default."""
        spec = self.stack.function(logical_id)
        if spec.reserved_concurrency:
            return spec.reserved_concurrency
        for mapping in self.stack.event_source_mappings().values():
            maximum = mapping.get("ScalingConfig", {}).get("MaximumConcurrency")
            if maximum and self._function_logical_id(mapping["FunctionName"]) == logical_id:
                return int(maximum)
        return DEFAULT_CONCURRENCY

    def shutdown(self) -> None:
        for lambda_runtime in (self.lambda_runtime, self._lambda_on_demand):
            if lambda_runtime is not None:
                lambda_runtime.shutdown()

    def _lambda_function(self, logical_id: str, build_dir: Path, endpoints: dict[str, str]) -> LambdaFunction:
        spec = self.stack.function(logical_id)
        return LambdaFunction(
            spec=spec,
            task_dir=build_dir / logical_id,
            layer_dirs=layer_dirs_for(list(spec.layer_refs), build_dir, self.stack.template.code_paths),
            concurrency=self.concurrency(logical_id),
            region=self.stack.region,
            environment={**spec.environment, **self.function_overrides, **endpoints},
            ephemeral_storage_mb=spec.ephemeral_storage_mb,
        )

    # ---------------------------------------------------------------- event sources
    @cached_property
    def sqs_sources(self) -> dict[str, SqsEventSource]:
        """SQS event source mappings by logical id."""
        sources = {}
        for logical_id, mapping in self.stack.event_source_mappings().items():
            arn = mapping["EventSourceArn"]
            if not arn.startswith("arn:aws:sqs:"):
                continue
            queue = self.stack.ensure(self.stack.logical_id_for_arn(arn))
            function_id = self._function_logical_id(mapping["FunctionName"])
            sources[logical_id] = SqsEventSource(
                mapping,
                queue.attributes["QueueUrl"],
                self.client("sqs"),
                invoke=partial(self.invoke, function_id),
                region=self.stack.region,
            )
        return sources

    def sqs_source_for(self, function_logical_id: str) -> SqsEventSource:
        matches = [
            source
            for source in self.sqs_sources.values()
            if self._function_logical_id(source.mapping["FunctionName"]) == function_logical_id
        ]
        if len(matches) != 1:
            raise LookupError(f"{function_logical_id} has {len(matches)} SQS event sources")
        return matches[0]

    # ---------------------------------------------------------------- helpers
    def queue_url(self, logical_id: str) -> str:
        return self.stack.ensure(logical_id).attributes["QueueUrl"]

    def queue_depth(self, logical_id: str) -> int:
        """Messages in the queue, visible or in flight: what the console shows as its depth."""
        attributes = self.client("sqs").get_queue_attributes(
            QueueUrl=self.queue_url(logical_id),
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        return int(attributes["ApproximateNumberOfMessages"]) + int(attributes["ApproximateNumberOfMessagesNotVisible"])

    def table_name(self, logical_id: str) -> str:
        return self.stack.ensure(logical_id).ref

    def seed_datasets(self, directory: Path = DATASET_DIR, owners: tuple[str, ...] = DATASET_OWNERS) -> list[str]:
        s3 = self.client("s3")
        s3.create_bucket(Bucket=DATASET_BUCKET)
        urls = []
        for owner in owners:
            for path in sorted(directory.iterdir()):
                s3.put_object(Bucket=DATASET_BUCKET, Key=dataset_prefix(owner) + path.name, Body=path.read_bytes())
                urls.append(local_dataset_url(owner, path.name))
        return urls

    def function_logical_id(self, function_name: str) -> str:
        """FunctionName as templates and APIs give it (name, ARN, ARN with qualifier) -> logical id."""
        return self._function_logical_id(function_name)

    def _function_logical_id(self, function_name: str) -> str:
        # Every local invocation runs $LATEST: an alias or version ARN (a trigger through AutoPublishAlias)
        # or "name:qualifier" is its function.
        function_name = unqualified(function_name)
        for logical_id, spec in self.stack.functions().items():
            if function_name in (spec.name, spec.arn, logical_id):
                return logical_id
        raise LookupError(f"no function {function_name}")
