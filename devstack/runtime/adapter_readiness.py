"""The Lambda Web Adapter's readiness check, from its documented settings (AWS_LWA_READINESS_CHECK_PATH,
_PROTOCOL, _HEALTHY_STATUS; AWS_LWA_INVOKE_MODE): an exec-wrapper function's environment is initialized once its
app answers it (https://github.com/awslabs/aws-lambda-web-adapter, README).
"""

from __future__ import annotations

import socket
from dataclasses import dataclass

import httpx

from devstack.runtime.execution_environment import ExecutionEnvironment


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
