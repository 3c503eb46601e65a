"""The call-log-telemetry extension from the built layer, in the Lambda runtime: each invocation's
platform report reaches CallLogStream (a timeout with status timeout), CallLogAnalyzer turns a timeout
burst into an alert, and a stream that does not answer costs records, never an invocation."""

from __future__ import annotations

import io
import json

import pytest

from devstack.runtime.execution_environment import LambdaFunction
from devstack.runtime.function_errors import FunctionError
from devstack.runtime.lambda_runtime import LambdaRuntime
from devstack.stack.resources import FunctionSpec
from tests.e2e.conftest import BUILD_DIR, free_port
from tests.kinesis import stream_records

pytestmark = pytest.mark.e2e

PROBES = BUILD_DIR.parents[1] / "tests" / "e2e" / "lambda_functions"


def probe_runtime(stack, timeout: int = 10, **environment: str) -> tuple[LambdaRuntime, io.StringIO]:
    """A probe function with the built core layer and the extension's layer, wired to the stack's AWS endpoint."""
    variables = {
        "AWS_ENDPOINT_URL": stack.aws_url,
        "CALL_LOG_STREAM_NAME": stack.environment.table_name("CallLogStream"),
        **environment,
    }
    spec = FunctionSpec("Probe", "local-Probe", "arn:aws:lambda:us-east-1:123456789012:function:local-Probe",
                        "probe.identity", PROBES, (), timeout, 256, variables)  # fmt: skip
    layers = (BUILD_DIR / "SharedLayer", BUILD_DIR / "TelemetryExtensionLayer")
    function = LambdaFunction(spec, PROBES, layers, 1, "us-east-1", variables)
    output = io.StringIO()
    return LambdaRuntime({"Probe": function}, stack.environment.lambda_runtime.image, output), output


def reports(stack) -> list[dict]:
    records = stream_records(stack.environment.table_name("CallLogStream"))
    decoded = [json.loads(record["Data"]) for record in records]
    return [record for record in decoded if record["eventType"] == "platform_report"]


def alert_inbox(stack):
    sqs = stack.client("sqs")
    url = sqs.create_queue(QueueName="telemetry-alerts")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    stack.client("sns").subscribe(
        TopicArn=stack.environment.stack.ensure("AlertTopic").ref,
        Protocol="sqs",
        Endpoint=arn,
        Attributes={"RawMessageDelivery": "true"},
    )
    return lambda: [
        json.loads(m["Body"]) for m in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
    ]


def test_a_timeout_reaches_the_call_log_as_a_timeout_report_and_the_analyzer_alerts(start_stack):
    # Given the product stack in the Lambda runtime, alerting on the first timeout, and a probe function
    # with a 1 s timeout that carries the extension's layer
    stack = start_stack(runtime="lambda", parameters={"TimeoutAlertThreshold": 1})
    inbox = alert_inbox(stack)
    runtime, _ = probe_runtime(stack, timeout=1)

    # When it runs once, then past its timeout, and the stack's event sources run
    runtime.invoke("Probe", {})
    with pytest.raises(FunctionError):
        runtime.invoke("Probe", {"seconds": 30})
    runtime.shutdown()
    written = reports(stack)
    stack.settle()

    # Then the call log holds one report per invocation, the first cold, the second a timeout ...
    assert [(r["functionName"], r["status"], r["coldStart"]) for r in written] == [
        ("local-Probe", "success", True),
        ("local-Probe", "timeout", False),
    ]
    assert {"initDurationMs", "durationMs", "billedDurationMs", "maxMemoryUsedMb", "memorySizeMb"} <= set(written[0])
    # ... and CallLogAnalyzer turned the timeout into an alert for the function
    [alert] = inbox()
    assert (alert["alert"], alert["function"], alert["timeoutsInBatch"]) == ("timeout_burst", "local-Probe", 1)


def test_a_stream_that_does_not_answer_never_fails_an_invocation_and_its_records_are_counted_as_dropped(start_stack):
    # Given the extension pointed at a Kinesis endpoint where nothing listens
    stack = start_stack(runtime="lambda")
    runtime, output = probe_runtime(stack, AWS_ENDPOINT_URL_KINESIS=f"http://127.0.0.1:{free_port()}")

    # When the function is invoked and its environment shut down
    answers = [runtime.invoke("Probe", {}) for _ in range(3)]
    runtime.shutdown()

    # Then every invocation answered, and the extension counted what it could not write
    assert all("environment" in answer for answer in answers)
    assert "call-log-telemetry: 0 records written, 3 dropped" in output.getvalue(), output.getvalue()[-2000:]
    assert reports(stack) == []


def test_the_extension_registers_for_invoke_and_shutdown_and_subscribes_to_platform_events_only(start_stack):
    # Given a function that carries the extension's layer
    stack = start_stack(runtime="lambda")
    runtime, _ = probe_runtime(stack)

    # When its environment initializes (init ends only once the extension waits for its first event)
    with runtime.pool("Probe").environment() as env:
        [extension] = env.extensions.extensions.values()
        subscription = extension.subscription
    runtime.shutdown()

    # Then the Extensions and Telemetry APIs received what the documentation asks for
    assert (extension.name, extension.events) == ("call-log-telemetry", ["INVOKE", "SHUTDOWN"])
    assert subscription is not None and subscription.types == {"platform"}  # function logs stay off
    assert (subscription.max_items, subscription.max_bytes, subscription.timeout) == (1000, 262144, 0.1)
    assert subscription.uri.startswith("http://127.0.0.1:")  # sandbox.localdomain, as the sandbox resolves it
