"""OpenTelemetry spans for a tool call, from the client's request to the worker's last write (docs/operations.md,
"Traces"). One module per job:

- `state`: the process's tracer (None while tracing is off) and whether spans are recorded;
- `setup`: configuring it once per process (TRACING_MODE), flushing, and a SnapStart restore's reset;
- `spans`: `span()` around a block and the attributes of the current span;
- `attributes`: what an attribute may hold (never credentials, payloads or query strings);
- `propagation`: W3C trace context across the queue, the probe payload and Lambda's `AWSTraceHeader`;
- `otlp_export`: the OTLP/HTTP JSON exporter (signed for X-Ray's endpoint, or plain for a collector);
- `aws_calls`: a client span around each AWS call a botocore client makes.

Off by default (TRACING_MODE=off): nothing here imports OpenTelemetry, `span()` hands back one shared object that
does nothing, and no AWS client gets a hook. On (xray or otlp), spans go through the OpenTelemetry SDK to the OTLP
endpoint of the collector extension (the ADOT Lambda layer, which also brings the SDK and its exporter: neither
ships in this stack's layers). A process that already set an SDK tracer provider (the local stack, a test) keeps it.
"""
