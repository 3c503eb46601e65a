"""The tools the backend can run. Adding a tool: one module with an input model and a run function,
plus one entry in TOOLS below."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ValidationError

from mcp_backend.tools import analyze_dataset
from mcp_backend.tools.dataset_stream import FetchPolicy
from mcp_backend.tools.errors import InvalidToolInput
from mcp_backend.validation import describe_validation_error

ProgressCallback = Callable[[float, str], None]


@dataclass(frozen=True)
class ToolContext:
    """What a tool may use besides its input: the caller, the fetch policy, a progress sink."""

    user_id: str
    fetch_policy: FetchPolicy = field(default_factory=FetchPolicy)
    progress: ProgressCallback | None = None


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    input_model: type[BaseModel]
    run: Callable[[Any, ToolContext], dict[str, Any]]

    def parse_input(self, arguments: dict[str, Any]) -> BaseModel:
        try:
            return self.input_model.model_validate(arguments)
        except ValidationError as error:
            raise InvalidToolInput(f"{self.name}: {describe_validation_error(error)}") from None

    def __call__(self, arguments: dict[str, Any], context: ToolContext) -> dict[str, Any]:
        return self.run(self.parse_input(arguments), context)


TOOLS: dict[str, Tool] = {
    tool.name: tool
    for tool in (
        Tool(
            name="analyze_dataset",
            description="Row count, columns and per-column statistics of a CSV or JSON dataset (s3:// or https://).",
            input_model=analyze_dataset.AnalyzeInput,
            run=lambda request, ctx: analyze_dataset.analyze_dataset(
                request, policy=ctx.fetch_policy, progress=ctx.progress
            ),
        ),
    )
}
