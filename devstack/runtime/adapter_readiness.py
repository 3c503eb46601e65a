"""The Lambda Web Adapter's readiness check, from its documented settings (AWS_LWA_READINESS_CHECK_PATH,
_PROTOCOL, _HEALTHY_STATUS; AWS_LWA_INVOKE_MODE): an exec-wrapper function's environment is initialized once its
app answers it (https://github.com/awslabs/aws-lambda-web-adapter, README).

With SnapStart, the adapter (v1.1.0 and later) also runs the snapshot's lifecycle for the app, a separate process
(aws/aws-lambda-web-adapter pull requests 790 and 837): before the snapshot it POSTs
AWS_LWA_SNAPSTART_BEFORE_CHECKPOINT_PATH on the app, and after a restore, before any traffic, it POSTs
AWS_LWA_SNAPSTART_AFTER_RESTORE_PATH and then runs the readiness check again; a non-2xx answer or no answer fails
that phase. Locally there is no snapshot: an environment of a SnapStart function is initialized, then goes through
both hooks at once, as the one environment a snapshot would resume (`snapstart_cycle`).
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass

import httpx

from devstack.runtime.execution_environment import ExecutionEnvironment
from devstack.runtime.function_errors import FunctionError

HOOK_TIMEOUT_SECONDS = 60.0  # each hook POST, as the adapter bounds it


@dataclass(frozen=True)
class AdapterSettings:
    readiness_path: str
    readiness_protocol: str
    healthy: tuple[tuple[int, int], ...]
    streaming: bool
    before_checkpoint_path: str = ""
    after_restore_path: str = ""

    @property
    def hook_paths(self) -> set[str]:
        """The app's SnapStart hook paths: the adapter answers a request from outside for them with 403."""
        return {path for path in (self.before_checkpoint_path, self.after_restore_path) if path}

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
            before_checkpoint_path=environment.get("AWS_LWA_SNAPSTART_BEFORE_CHECKPOINT_PATH", ""),
            after_restore_path=environment.get("AWS_LWA_SNAPSTART_AFTER_RESTORE_PATH", ""),
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

    def snapstart_cycle(self, env: ExecutionEnvironment, limit: float) -> float:
        """The adapter's part of a snapshot and a restore, on an initialized environment: the before-checkpoint
        hook, then the after-restore hook and the readiness check again. Returns the restore's milliseconds; a
        failed phase raises FunctionError, as Lambda fails the restore."""
        self._post_hook(env, self.before_checkpoint_path, "before-checkpoint")
        started = time.monotonic()
        self._post_hook(env, self.after_restore_path, "after-restore")
        deadline = started + limit
        while not self.ready(env):
            if time.monotonic() > deadline:
                raise _restore_failed("the readiness check never answered after the restore")
            time.sleep(0.01)
        return (time.monotonic() - started) * 1000

    def _post_hook(self, env: ExecutionEnvironment, path: str, phase: str) -> None:
        if not path:
            return
        try:
            status = httpx.post(f"http://127.0.0.1:{env.port}{path}", timeout=HOOK_TIMEOUT_SECONDS).status_code
        except httpx.HTTPError as error:
            raise _restore_failed(f"the {phase} hook {path} did not answer ({type(error).__name__})") from error
        if not 200 <= status < 300:
            raise _restore_failed(f"the {phase} hook {path} answered {status}")


def _restore_failed(message: str) -> FunctionError:
    return FunctionError({"errorType": "SnapStartException", "errorMessage": message})
