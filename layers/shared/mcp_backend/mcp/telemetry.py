"""The Powertools decorator stack, as ASGI and MCP middleware (behind the Lambda Web Adapter there is no
handler to decorate).

- RequestTelemetry (ASGI, outermost): correlation id on every log line, from `x-correlation-id` or the
  Lambda request id the adapter forwards in `x-amzn-request-context`; the X-Ray trace header; the
  ColdStart metric once per process.
- ToolCallTelemetry (SDK ServerMiddleware, per tools/call): the call log record and the tool run's ToolName
  metrics (mcp_backend.observability.ToolRunMetrics: one blob per tool and second), no payloads anywhere.
  Records go to a RecordShipper: no request waits for Kinesis. What is pending of either when the environment
  shuts down is written on SIGTERM (uvicorn's lifespan shutdown, which RequestTelemetry hooks).
"""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from collections.abc import Callable, Collection, Mapping
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit, single_metric
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp_types import CallToolResult
from starlette.types import ASGIApp, Receive, Scope, Send

from mcp_backend.calllog.models import CallLogEventType, CallLogRecord
from mcp_backend.calllog.shipper import RecordShipper
from mcp_backend.mcp.auth import current_caller
from mcp_backend.mcp.guard import request_headers
from mcp_backend.mcp.request_spans import link_to_request_span
from mcp_backend.observability import logger, metrics, tool_runs
from mcp_backend.tracing.state import enabled as tracing_enabled

_CORRELATION_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
CLIENT_DISCONNECTED = "client_disconnected"
CLIENT_CLOSED_REQUEST = 499
_cold_start = True


def lambda_request_id(headers: dict[str, str]) -> str | None:
    """The Lambda request id the Web Adapter forwards in `x-amzn-request-context`, when well-formed."""
    try:
        request_id = json.loads(headers.get("x-amzn-request-context", "{}")).get("requestId")
    except (ValueError, AttributeError):
        return None
    return request_id if isinstance(request_id, str) and _CORRELATION_ID.fullmatch(request_id) else None


def correlation_id_for(headers: dict[str, str], request_id: str | None) -> str:
    """A caller-supplied id when well-formed, else the Lambda request id, else a fresh one."""
    supplied = headers.get("x-correlation-id", "")
    if _CORRELATION_ID.fullmatch(supplied):
        return supplied
    return request_id or str(uuid.uuid4())


def _record_cold_start() -> bool:
    """True for the process's first request (and the ColdStart metric then)."""
    global _cold_start
    if not _cold_start:
        return False
    _cold_start = False
    # Same shape as Powertools' log_metrics(capture_cold_start_metric=True).
    with single_metric(name="ColdStart", unit=MetricUnit.Count, value=1, namespace=metrics.namespace) as metric:
        metric.add_dimension(name="function_name", value=os.environ.get("AWS_LAMBDA_FUNCTION_NAME", "local"))
        metric.add_dimension(name="service", value=metrics.service or "mcp-backend")
    return True


def _count_client_disconnect() -> None:
    # The same labels as the endpoint's other metrics (Service, Environment).
    with single_metric(
        name="ClientDisconnects",
        unit=MetricUnit.Count,
        value=1,
        namespace=metrics.namespace,
        default_dimensions=metrics.default_dimensions,
    ):
        pass


# The keys Powertools' inject_lambda_context puts on a handler's lines; the endpoint has no handler to decorate.
LAMBDA_CONTEXT_KEYS = ("function_name", "function_memory_size", "function_arn", "function_request_id", "cold_start")


class RequestTelemetry:
    def __init__(self, app: ASGIApp, on_shutdown: Collection[Callable[[], None]] = ()) -> None:
        self.app = app
        # Run when the server shuts down (uvicorn's lifespan, on the SIGTERM Lambda sends before it ends the
        # environment), before the inner app's shutdown completes.
        self.on_shutdown = tuple(on_shutdown)
        # Read once, when the app is built inside the function's environment: every line of a request names
        # this function and that request, as a decorated handler's lines do, even where other functions share
        # the process and Powertools' logger (the local stack's in-process runtime).
        self.function_name = os.environ.get("AWS_LAMBDA_FUNCTION_NAME")
        self.function_memory_size = os.environ.get("AWS_LAMBDA_FUNCTION_MEMORY_SIZE")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, self._before_shutdown_completes(send))
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = request_headers(scope)
        cold_start = _record_cold_start()
        request_id = lambda_request_id(headers)
        correlation_id = correlation_id_for(headers, request_id)
        trace_header = headers.get("x-amzn-trace-id")
        if trace_header:
            # The adapter passes the trace header per request; botocore forwards it on AWS calls from
            # here (one request at a time per Lambda environment, as with the managed runtime).
            os.environ["_X_AMZN_TRACE_ID"] = trace_header
        # Context-local keys: each request (asyncio task) logs its own; they win over any process-wide key.
        logger.thread_safe_append_keys(
            correlation_id=correlation_id,
            function_name=self.function_name,
            function_memory_size=self.function_memory_size,
            function_arn=None,  # not known to the app: no other function's ARN either
            function_request_id=request_id,
            cold_start=cold_start,
        )
        state = {"status": 0, "answered": False, "hung_up": False}

        async def send_with_id(message: Any) -> None:
            if message["type"] == "http.response.start":
                state["status"] = message["status"]
                message = {
                    **message,
                    "headers": [*message.get("headers", []), (b"x-correlation-id", correlation_id.encode())],
                }
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                state["answered"] = True
            await send(message)

        async def receive_watching() -> Any:
            message = await receive()
            if message["type"] == "http.disconnect" and not state["answered"]:
                state["hung_up"] = True
            return message

        try:
            await self.app(scope, receive_watching, send_with_id)
        finally:
            extra = {"method": scope["method"], "path": scope["path"], "status": state["status"], "outcome": "answered"}
            if state["hung_up"]:
                # The client's doing, not the server's: INFO, no trace, and never counted as a 5xx. 499 is the
                # status proxies log for a request the client closed (no response reached anyone).
                extra |= {"outcome": CLIENT_DISCONNECTED, "status": state["status"] or CLIENT_CLOSED_REQUEST}
                _count_client_disconnect()
            logger.info("mcp request", extra=extra)
            logger.thread_safe_remove_keys(["correlation_id", "user_id", "tool", *LAMBDA_CONTEXT_KEYS])
            tool_runs.flush_if_due()  # no invocation end here: runs an idle second ago are written now

    def _before_shutdown_completes(self, send: Send) -> Send:
        async def send_after_hooks(message: Any) -> None:
            if message["type"] == "lifespan.shutdown.complete":
                for hook in self.on_shutdown:
                    hook()
            await send(message)

        return send_after_hooks


class ToolCallTelemetry:
    """SDK ServerMiddleware: runs around every MCP request inside the SDK, before params validation.
    Each tools/call also puts one tool_call or tool_error record on the call log."""

    def __init__(self, call_log: RecordShipper | None = None, tool_names: Collection[str] = ()) -> None:
        self.call_log = call_log
        self.tool_names = frozenset(tool_names)

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        request = ctx.request
        scope = request.scope if request is not None and hasattr(request, "scope") else None
        principal = current_caller()
        if scope is not None and tracing_enabled():
            link_to_request_span(scope)  # inside the SDK's MCP span, which a `_meta` traceparent may have moved
        if ctx.method != "tools/call":
            if principal is not None:
                logger.thread_safe_append_keys(user_id=principal.user_id)
            return await call_next(ctx)
        requested = ctx.params.get("name") if isinstance(ctx.params, Mapping) else None
        # A metric dimension: only names the server has, or one stream per typo.
        # The name is untrusted JSON (a list is unhashable): only a string is looked up.
        tool_name = requested if isinstance(requested, str) and requested in self.tool_names else "unknown"
        # One append per request: each copies the logger's context-local keys.
        if principal is not None:
            logger.thread_safe_append_keys(user_id=principal.user_id, tool=tool_name)
        else:
            logger.thread_safe_append_keys(tool=tool_name)
        started = time.monotonic()
        error_type = ""
        try:
            with tool_runs.run(tool_name):
                result = await call_next(ctx)
                if _is_tool_error(result):
                    raise _ReportedToolError(result)
        except _ReportedToolError as reported:
            error_type = "ToolError"
            result = reported.result
        except Exception as error:
            error_type = type(error).__name__
            raise
        finally:
            self._log_call(principal, tool_name, started, error_type)
        return result

    def _log_call(self, principal: Any, tool_name: str, started: float, error_type: str) -> None:
        if self.call_log is None or principal is None or not tool_name:
            return
        record = CallLogRecord(
            event_type=CallLogEventType.TOOL_ERROR if error_type else CallLogEventType.TOOL_CALL,
            user_id=principal.user_id,
            tool_name=tool_name,
            latency_ms=round((time.monotonic() - started) * 1000, 3),
            error_type=error_type or None,
        )
        # Handed to the shipper's thread: the response never waits for PutRecords.
        self.call_log.add([record])


class _ReportedToolError(Exception):
    """A tool error the SDK already turned into a result: counted and annotated as an error, then returned."""

    def __init__(self, result: HandlerResult) -> None:
        super().__init__("tool reported an error")
        self.result = result


def _is_tool_error(result: Any) -> bool:
    if isinstance(result, CallToolResult):
        return bool(result.is_error)
    return isinstance(result, dict) and result.get("isError") is True
