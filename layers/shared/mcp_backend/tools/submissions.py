"""The one way a job enters the queue. Every door that creates a job (submit_<tool>, submit_<tool>_batch, a
task-augmented tools/call, any door added later) goes through JobSubmissions, which applies one policy in one
order: the input validated against the tool's submission model, the tool's own admission check for the caller
(`Tool.admit`), the caller's tier (batch size, then its job quota, written with the job), and only then the jobs
service. A door only maps what is refused to its protocol's answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, Field, ValidationError, create_model

from mcp_backend.api_keys import Principal
from mcp_backend.jobs.models import JobStatus
from mcp_backend.jobs.service import JobsService, JobSubmission
from mcp_backend.observability import count_limit_refusal
from mcp_backend.quotas import QuotaExceeded
from mcp_backend.tools.context import ErrorDetail, ToolOutput
from mcp_backend.tools.errors import InvalidToolInput, ToolError
from mcp_backend.tools.services import MissingToolService, ToolServices
from mcp_backend.tools.table import Tool
from mcp_backend.validation import describe_validation_error


class SubmittedJob(ToolOutput):
    """A submit tool's answer: the job, PENDING when new; a repeat of a callId answers the job's state."""

    jobId: str
    status: JobStatus
    repeated: bool | None = Field(None, description="true when this callId had already submitted the job")


class SubmittedItem(ToolOutput):
    """One item of a batch, in the caller's position: its job, or the error that refused it."""

    index: int
    jobId: str | None = None
    status: JobStatus | None = None
    repeated: bool | None = None
    error: ErrorDetail | None = None


class SubmittedBatch(ToolOutput):
    """A batch submit tool's answer: one entry per item, in order."""

    results: list[SubmittedItem]


def submit_model(tool: Tool) -> type[BaseModel]:
    """The tool's input plus a client-chosen idempotency key."""
    return create_model(
        model_name(tool.submit_name),
        __base__=tool.input_model,
        callId=(
            str | None,
            Field(
                None,
                min_length=1,
                max_length=128,
                pattern=r"^[A-Za-z0-9._:-]+$",
                description="Client-chosen idempotency key: the same callId returns the same job and enqueues it once.",
            ),
        ),
    )


def model_name(tool_name: str) -> str:
    return "".join(part.capitalize() for part in tool_name.split("_")) + "Input"


def submission(tool_name: str, request: BaseModel) -> JobSubmission:
    job_input = request.model_dump(exclude={"callId"}, exclude_defaults=True, mode="json")
    return JobSubmission(tool=tool_name, input=job_input, call_id=getattr(request, "callId", None))


def item_error(index: int, error: ToolError | QuotaExceeded) -> dict[str, Any]:
    """One refused item of a batch, in the caller's position."""
    if isinstance(error, QuotaExceeded):
        return {"index": index, "error": error.as_error()}
    return {"index": index, "error": {"type": error.error_type, "message": error.message}}


class JobSubmissions:
    """The submission policy over a tool table's job-capable tools, for every door."""

    def __init__(self, table: Mapping[str, Tool], services: ToolServices) -> None:
        self.tools = {tool.name: tool for tool in table.values() if tool.runs_as_job}
        if self.tools and services.jobs is None:
            raise MissingToolService("job tools are submitted through the jobs service (JOB_TABLE_NAME)")
        self.services = services
        self.jobs: JobsService = services.jobs  # type: ignore[assignment]
        self.models = {name: submit_model(tool) for name, tool in self.tools.items()}

    def submit(
        self, caller: Principal, tool_name: str, arguments: Mapping[str, Any], hold_to_confirm: bool = False
    ) -> dict[str, Any]:
        """One job: raises InvalidToolInput, the tool's admission error, QuotaExceeded or a JobRequestError when
        it is refused (nothing is written then). With `hold_to_confirm`, a job the tool wants confirmed (its
        `confirm` question) is recorded but held, unqueued, until `JobsService.release`."""
        tool = self.tools[tool_name]
        request = self._validated(tool, arguments)
        self._admit(tool, request, caller)
        question = tool.confirm(request) if hold_to_confirm and tool.confirm is not None else None
        quota = self.services.job_quota(caller.tier)
        return self.jobs.submit(caller.user_id, submission(tool.name, request), quota, hold_for=question)

    def submit_many(self, caller: Principal, tool_name: str, items: list[Any]) -> list[dict[str, Any]]:
        """Many jobs: one answer per item in the caller's order. Items past the tier's batch size, invalid items
        and items the tool does not admit are refused one by one; the others are submitted under the quota."""
        tool = self.tools[tool_name]
        cap = self.services.tier_limits(caller.tier).batch_items
        results: list[dict[str, Any]] = []
        for index in range(cap, len(items)):
            refused = QuotaExceeded("batch_items", caller.tier, cap, "send the remaining items in another call")
            count_limit_refusal(refused.limit, refused.tier, caller.user_id, refused.resets)
            results.append(item_error(index, refused))
        admitted: list[tuple[int, BaseModel]] = []
        for index, item in enumerate(items[:cap]):
            try:
                request = self._validated(tool, item)
                self._admit(tool, request, caller)
            except ToolError as refused:
                results.append(item_error(index, refused))
                continue
            admitted.append((index, request))
        jobs = [submission(tool.name, request) for _, request in admitted]
        submitted = self.jobs.submit_many(caller.user_id, jobs, self.services.job_quota(caller.tier))
        # The service numbers the items it was given; answer in the caller's positions.
        results.extend({**result, "index": admitted[result["index"]][0]} for result in submitted)
        return sorted(results, key=lambda result: result["index"])

    def _validated(self, tool: Tool, arguments: Any) -> BaseModel:
        try:
            return self.models[tool.name].model_validate(arguments)
        except ValidationError as error:
            raise InvalidToolInput(describe_validation_error(error)) from None

    def _admit(self, tool: Tool, request: BaseModel, caller: Principal) -> None:
        """The tool's own check for this caller (a dataset outside its prefix, say): raises its ToolError."""
        if tool.admit is not None:
            tool.admit(request, self.services.context_for(tool, caller.user_id, tier=caller.tier))
