"""The local stack's Lambda API for durable functions, through boto3's own Lambda client on loopback: an Invoke that
names a durable function starts an execution in the testing SDK's runner, once per name and payload;
StopDurableExecution and SendDurableExecutionCallbackSuccess reach it."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from aws_durable_execution_sdk_python import DurableContext, durable_execution
from aws_durable_execution_sdk_python.execution import InvocationStatus
from aws_durable_execution_sdk_python_testing.execution import ExecutionStatus
from botocore.config import Config

from devstack.front_doors.lambda_api import LambdaApi
from devstack.runtime.durable_functions import LocalDurableFunctions

FUNCTION = "arn:aws:lambda:us-east-1:123456789012:function:stack-Waiter:live"


@durable_execution
def waiter(event: dict[str, Any], context: DurableContext) -> dict[str, Any]:
    """Waits for one callback, then answers what it got."""
    answer = context.wait_for_callback(lambda callback_id, _ctx: None, name="answer")
    return {"asked": event["question"], "answer": json.loads(answer)}


def resolve(name: str) -> str:
    if "Waiter" not in name:
        raise LookupError(name)
    return "Waiter"


def not_called(*_args: Any) -> Any:
    raise AssertionError("a durable function is not invoked as a plain one")


@pytest.fixture
def served() -> Iterator[tuple[Any, LocalDurableFunctions]]:
    functions = LocalDurableFunctions({"Waiter": waiter}, resolve=resolve)
    api = LambdaApi(resolve, not_called, not_called, not_called, durable=functions)
    listener = socket.create_server(("127.0.0.1", 0))
    api.serve(listener)
    client = boto3.client(
        "lambda",
        endpoint_url=f"http://127.0.0.1:{listener.getsockname()[1]}",
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=Config(retries={"max_attempts": 1}),
    )
    yield client, functions
    api.shutdown()
    listener.close()
    functions.close()


def start(client: Any, payload: dict[str, Any], name: str = "job-0001-durable") -> str:
    answer = client.invoke(
        FunctionName=FUNCTION, InvocationType="Event", Payload=json.dumps(payload), DurableExecutionName=name
    )
    assert answer["StatusCode"] == 202
    return str(answer["DurableExecutionArn"])


def test_an_invoke_by_name_starts_one_execution_and_its_callback_completes_it(served):
    # Given the local Lambda API in front of a durable function
    client, functions = served

    # When it is invoked twice by the same name and payload, then with another payload, and the callback its
    # execution waits on is answered
    arn = start(client, {"question": "go?"})
    again = start(client, {"question": "go?"})
    with pytest.raises(client.exceptions.DurableExecutionAlreadyStartedException):
        start(client, {"question": "another"})
    client.send_durable_execution_callback_success(
        CallbackId=functions.waiting_callback(arn), Result=json.dumps({"confirm": True}).encode()
    )

    # Then one execution ran, to the end, with the answer
    assert again == arn
    outcome = functions.result(arn)
    assert outcome.status is InvocationStatus.SUCCEEDED
    assert json.loads(outcome.result or "") == {"asked": "go?", "answer": {"confirm": True}}


def test_stop_ends_a_waiting_execution_and_an_unknown_one_is_not_found(served):
    # Given an execution waiting for its callback
    client, functions = served
    arn = start(client, {"question": "go?"})
    functions.waiting_callback(arn)

    # When it is stopped, and an execution that does not exist is stopped
    client.stop_durable_execution(DurableExecutionArn=arn, Error={"ErrorType": "JobCancelled", "ErrorMessage": "x"})
    with pytest.raises(client.exceptions.ResourceNotFoundException):
        client.stop_durable_execution(
            DurableExecutionArn="arn:aws:lambda:us-east-1:1:function:f:1/durable-execution/a/b"
        )

    # Then the first ended STOPPED
    assert functions.result(arn).execution_status is ExecutionStatus.STOPPED
