"""Tracing configured once per process from TRACING_MODE, and what an invocation's end and a SnapStart restore do
with it."""

from __future__ import annotations

import logging
from typing import Any

from mcp_backend.config import TracingSettings, load_settings
from mcp_backend.tracing.otlp_export import OtlpJsonExporter
from mcp_backend.tracing.state import INSTRUMENTATION_NAME, STATE

_log = logging.getLogger("mcp_backend.tracing")


def configure(settings: TracingSettings | None = None) -> bool:
    """Once per process (later calls return what the first decided): tracing on when TRACING_MODE says so and the
    OpenTelemetry SDK can be imported. Returns whether spans are recorded."""
    with STATE.lock:
        if not STATE.configured:
            STATE.configured = True
            settings = settings or load_settings(TracingSettings)
            if settings.tracing_mode != "off":
                STATE.tracer, STATE.provider = _start(settings)
        return STATE.tracer is not None


def _start(settings: TracingSettings) -> tuple[Any, Any]:
    # Imported only with tracing on: the SDK comes with the MCP layer (McpServer, ProbeWorker) or the SDK layer the
    # TracingSdkLayerArn parameter names (the ADOT Python layer) on AWS, and with the dev group locally.
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
    except ImportError:
        _log.warning("TRACING_MODE is %s but the OpenTelemetry SDK is not installed: no spans", settings.tracing_mode)
        return None, None
    current = trace.get_tracer_provider()
    if isinstance(current, TracerProvider):  # set by the host process (the local stack, a test): kept
        return current.get_tracer(INSTRUMENTATION_NAME), current
    resource = Resource.create(
        {
            "service.name": settings.aws_lambda_function_name or INSTRUMENTATION_NAME,
            "cloud.provider": "aws",
            "cloud.region": settings.aws_region,
            "faas.name": settings.aws_lambda_function_name,
            "deployment.environment.name": settings.environment,
        }
    )
    provider = TracerProvider(resource=resource, sampler=ParentBased(TraceIdRatioBased(settings.tracing_sample_rate)))
    exporter = STATE.exporter = OtlpJsonExporter.for_settings(settings)
    # Duck-typed (not a SpanExporter subclass), so that defining it imports no SDK.
    provider.add_span_processor(BatchSpanProcessor(exporter))  # type: ignore[arg-type]
    trace.set_tracer_provider(provider)
    return provider.get_tracer(INSTRUMENTATION_NAME), provider


def reset() -> None:
    """Forget the configuration (tests configure again with their own settings)."""
    with STATE.lock:
        STATE.tracer, STATE.provider, STATE.exporter, STATE.configured = None, None, None, False


def forget_connections() -> None:
    """After a SnapStart restore (mcp_backend.snapstart): the exporter's connection and credentials are the
    snapshot's; the next export opens its own and resolves the restored environment's credentials."""
    if STATE.exporter is not None:
        STATE.exporter.reset()


def flush(timeout_millis: int = 2000) -> None:
    """Export the spans ended so far: at an invocation's end, before Lambda may freeze the environment."""
    provider = STATE.provider
    if provider is not None and hasattr(provider, "force_flush"):
        provider.force_flush(timeout_millis)
