"""Functions run the way Lambda runs them: the built artifact, in a Lambda-shaped sandbox per execution
environment, started by the runtime's own bootstrap and AWS's Runtime Interface Client (awslambdaric).

This module holds each function's pool of environments; devstack.runtime.execution_environment one
environment, devstack.runtime.runtime_image what they all share, devstack.runtime.build_output the build.

- An execution environment is one process tree started from `.aws-sam/build/<LogicalId>` (see
  devstack.runtime.sandbox for its file system) with exactly the variables the Lambda Python runtime documents,
  the template's Environment and the local stack's endpoints. It serves one invocation at a time
  through its own Runtime API (devstack.runtime.runtime_api) and is reused while warm.
- A function gets up to N environments at once: its ReservedConcurrentExecutions, else its SQS
  mapping's ScalingConfig.MaximumConcurrency, else DEFAULT_CONCURRENCY.
- An invocation past the function's Timeout kills its environment (the next one is a cold start) and
  fails with Sandbox.Timedout; an init failure (an import error, a start script that exits, a
  readiness check that never answers) fails the invocation with the error type Lambda gives it.
- Each environment's output is prefixed `[LogicalId/env] `; each invocation ends with a REPORT line.
- Exec-wrapper functions behind the Lambda Web Adapter are started through the wrapper, which runs
  their start script; devstack.front_doors.web_adapter then plays the adapter's part (readiness check, proxying).
- An idle environment is frozen (SIGSTOP to its process group: the runtime, its extensions and what a
  start script launched) and thawed (SIGCONT) before its next event: an invocation, a proxied request or
  SHUTDOWN. "Lambda freezes the execution environment when the runtime and each extension have completed
  and there are no pending events" (lambda-runtime-environment.html); here after FREEZE_AFTER_SECONDS.

https://docs.aws.amazon.com/lambda/latest/dg/lambda-runtime-environment.html (lifecycle, init, timeouts)
https://docs.aws.amazon.com/lambda/latest/dg/configuration-envvars.html (defined runtime variables)
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, TextIO

from devstack.runtime import leases
from devstack.runtime.adapter_readiness import AdapterSettings
from devstack.runtime.execution_environment import ExecutionEnvironment, LambdaFunction
from devstack.runtime.function_errors import FunctionError
from devstack.runtime.invocation_records import telemetry_status
from devstack.runtime.runtime_image import RuntimeImage
from devstack.runtime.sandbox import unavailable_reason

log = logging.getLogger("devstack.lambda")

DEFAULT_CONCURRENCY = 4
INIT_LIMIT_SECONDS = 10.0


class Throttled(Exception):
    """Every environment the function may have is busy and the caller asked not to wait."""


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
        # Benchmarks only: the CPUs the function's environments started from now on run on (None: any).
        self.cpus: frozenset[int] | None = None

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
                status = telemetry_status(error)
                if error.error_type == "Sandbox.Timedout":
                    env.print(str(error.document["errorMessage"]))
                raise
            finally:
                env.close_invocation(request_id, started, status, init_ms)
        return json.loads(response) if response else None

    def environments(self) -> list[ExecutionEnvironment]:
        """The function's environments now: busy, idle and frozen ones."""
        with self._condition:
            return list(self._all)

    def idle_environments(self) -> list[ExecutionEnvironment]:
        """The environments waiting in the pool for their next event (the next one taken is the last here)."""
        with self._condition:
            return list(self._idle)

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
        env = ExecutionEnvironment(self.function, self.image, self.output, self.cpus)
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
            if adapter is not None and self.function.spec.snap_start:
                # The environment a snapshot resumes: the Web Adapter's SnapStart hooks run before any traffic.
                env.restore_duration_ms = adapter.snapstart_cycle(env, limit)
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
