"""What a tool may use besides its input. The worker gives job tools the caller and the fetch policy; the
MCP endpoint also gives its synchronous tools a progress sink, the jobs service and the endpoint registry."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict

from mcp_backend.jobs.service import JobsService
from mcp_backend.probes.registry import EndpointRegistry
from mcp_backend.tools.dataset_stream import FetchPolicy

ProgressCallback = Callable[[float, str], None]


class StrictInput(BaseModel):
    """Base of tool input models: unknown fields are rejected and values never appear in errors."""

    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)


@dataclass(frozen=True)
class ToolContext:
    user_id: str
    fetch_policy: FetchPolicy = field(default_factory=FetchPolicy)
    progress: ProgressCallback | None = None
    jobs: JobsService | None = None
    endpoints: EndpointRegistry | None = None
    # Only the local stack allows loopback endpoints (no other private address) and plain http.
    allow_loopback_endpoints: bool = False
    uptime_window_seconds: int = 86400

    def job_service(self) -> JobsService:
        if self.jobs is None:  # a tool that reads jobs runs on the endpoint only; reaching here is a wiring bug
            raise RuntimeError("this tool needs the jobs service")
        return self.jobs

    def endpoint_registry(self) -> EndpointRegistry:
        if self.endpoints is None:
            raise RuntimeError("this tool needs the endpoint registry")
        return self.endpoints
