"""What a tool may use besides its input: the caller, the fetch policy, on the endpoint a progress sink, and
the services it declares in the tool table (built by mcp_backend.tools.services, the same on the endpoint
and in the worker)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from mcp_backend.config import TierLimits, TierLimitSettings
from mcp_backend.jobs.errors import JobCancelled
from mcp_backend.tiers import LOWEST_TIER
from mcp_backend.tools.dataset_stream import FetchPolicy, past_deadline
from mcp_backend.tools.errors import CannotAsk, ToolError
from mcp_backend.validation import describe_validation_error

if TYPE_CHECKING:  # the services are built by mcp_backend.tools.services; the tool table loads without them
    from mcp_backend.jobs.service import JobsService
    from mcp_backend.probes.registry import EndpointRegistry

ProgressCallback = Callable[[float, str], None]
# A question to the user (message, form schema) and the elicitation result it got.
AskCallback = Callable[[str, dict[str, Any]], dict[str, Any]]
# In the worker: whether the job's owner cancelled it (a consistent read of its status).
CancellationCheck = Callable[[], bool]


class StrictInput(BaseModel):
    """Base of tool input models: unknown fields are rejected and values never appear in errors. Validators are
    built at a model's first use (`defer_build`), not at import: no tool's input is part of a cold start."""

    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True, defer_build=True)


Arguments = TypeVar("Arguments", bound=BaseModel)


class InvalidArguments(ValueError):
    """Arguments that do not fit their model; the message names fields and rules, never values."""


def parse_arguments(model: type[Arguments], values: Mapping[str, object]) -> Arguments:
    """String arguments as their model: a prompt's arguments, or the variables the SDK's RFC 6570 matcher took
    from a resource URI. Pydantic converts the strings (an `int`, a datetime); a missing, unknown or invalid one
    is `InvalidArguments`."""
    try:
        return model.model_validate(dict(values))
    except ValidationError as error:
        raise InvalidArguments(describe_validation_error(error)) from None


class ToolOutput(BaseModel):
    """Base of tool output models: a tool's answer (its structuredContent), published as its outputSchema.
    Open (no additionalProperties: false), so a field can be added without breaking a client that validates
    answers against an older listing. Built at the first listing, not at import (`defer_build`)."""

    model_config = ConfigDict(defer_build=True)


class ErrorDetail(ToolOutput):
    """A refusal inside an answer (one batch item's, a failed job's): its type and a message for the caller.
    A quota refusal adds its limit and tier."""

    type: str
    message: str


class ServiceNotDeclared(ToolError):
    """A tool reached for a service it does not declare in the tool table: a wiring bug that every retry
    would hit again, so the job fails at once (permanent) instead of being retried into the DLQ."""


@dataclass(frozen=True)
class ToolContext:
    tool_name: str
    user_id: str
    # The caller's tier and its row of the limits table (the worker runs jobs with the lowest tier's).
    tier: str = LOWEST_TIER
    limits: TierLimits = field(default_factory=lambda: TierLimitSettings().tier_limits(LOWEST_TIER))
    fetch_policy: FetchPolicy = field(default_factory=FetchPolicy)
    progress: ProgressCallback | None = None
    jobs: JobsService | None = None
    endpoints: EndpointRegistry | None = None
    # Only the local stack allows loopback endpoints (no other private address) and plain http.
    allow_loopback_endpoints: bool = False
    uptime_window_seconds: int = 86400
    cancelled: CancellationCheck | None = None
    # Asks the caller's user (a message and a form's JSON schema) and returns the elicitation result
    # (`action`, `content`); None where nobody can be asked (the worker, a tool that does not declare `asks`).
    ask: AskCallback | None = None

    def checkpoint(self) -> None:
        """Where a long tool may stop: raises JobCancelled when its job was cancelled (in the worker), and
        CallDeadlineExceeded once a synchronous call's deadline has passed (on the endpoint)."""
        past_deadline(self.fetch_policy)
        if self.cancelled is not None and self.cancelled():
            raise JobCancelled("the job was cancelled by its owner")

    def elicit(self, message: str, schema: dict[str, Any]) -> dict[str, Any]:
        """The user's answer to a form (`action`: accept, decline or cancel; `content` when accepted). Raises
        CannotAsk when nobody can be asked here."""
        if self.ask is None:
            raise CannotAsk("this tool cannot ask its user here")
        return self.ask(message, schema)

    def job_service(self) -> JobsService:
        if self.jobs is None:
            raise ServiceNotDeclared(f"tool {self.tool_name!r} does not declare the jobs service")
        return self.jobs

    def endpoint_registry(self) -> EndpointRegistry:
        if self.endpoints is None:
            raise ServiceNotDeclared(f"tool {self.tool_name!r} does not declare the endpoints service")
        return self.endpoints
