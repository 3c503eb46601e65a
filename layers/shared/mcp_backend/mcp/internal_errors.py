"""SDK ServerMiddleware, outermost of ours: an exception nobody planned for, raised anywhere inside the SDK's
handling of a request (our middleware, a method handler, a metric), is logged once and answered as JSON-RPC's
internal error, -32603 "Internal error", without its text. The SDK answers an exception it does not know with
code 0 and the exception's message, which may name anything: a resource, a key, a payload's content.
What the SDK maps itself passes through: an MCPError carries its own answer, and pydantic's ValidationError is
its -32602 without pydantic's text."""

from __future__ import annotations

from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR
from pydantic import ValidationError

from mcp_backend.observability import logger


class InternalErrorsWithoutText:
    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        try:
            return await call_next(ctx)
        except (MCPError, ValidationError):
            raise
        except Exception as error:
            logger.exception("request failed unexpectedly", extra={"method": ctx.method})
            raise MCPError(INTERNAL_ERROR, "Internal error") from error
