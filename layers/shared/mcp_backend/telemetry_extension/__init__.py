"""call-log-telemetry: an external Lambda extension that turns the Telemetry API's platform reports
(init duration, duration, billed duration, memory, status, cold start) into call-log records on
CallLogStream, off the invocation's path. Started by /opt/extensions/call-log-telemetry."""
