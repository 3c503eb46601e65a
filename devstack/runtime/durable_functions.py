"""Lambda durable functions on the local stack: each durable function (DurableConfig in the template) runs in the
testing SDK's local runner (aws_durable_execution_sdk_python_testing: in-process, checkpoints in memory), behind
the two Lambda calls the stack's functions make of one: Invoke with a DurableExecutionName (ToolWorker's handoff)
and StopDurableExecution (a cancel).

As Lambda does (https://docs.aws.amazon.com/lambda/latest/dg/durable-execution-idempotency.html), a second start
with a name already used and the same payload answers the existing execution; with another payload it is refused
(DurableExecutionAlreadyStartedException). Executions live as long as the process; a restart forgets them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

import boto3
from aws_durable_execution_sdk_python.lambda_service import ErrorObject
from aws_durable_execution_sdk_python_testing.runner import DurableFunctionTestResult, DurableFunctionTestRunner

# The local runner's bound on one execution, in seconds; the template's ExecutionTimeout is longer, but a local
# execution that has not ended by then has stalled.
LOCAL_EXECUTION_TIMEOUT = 3600


class LocalDurableFunctions:
    """Durable executions of the stack's durable functions, by function name or ARN (any qualifier)."""

    def __init__(self, handlers: Mapping[str, Callable[[Any, Any], Any]], resolve: Callable[[str], str]) -> None:
        """`handlers`: each durable function's handler (decorated with durable_execution) by logical id;
        `resolve`: a FunctionName (name, ARN, qualified ARN) -> its logical id (LookupError when unknown)."""
        self._runners = {
            logical_id: DurableFunctionTestRunner(handler=handler) for logical_id, handler in handlers.items()
        }
        self._resolve = resolve
        self._started: dict[tuple[str, str], tuple[str, str]] = {}  # (function, name) -> (payload, ARN)
        self._runner_of: dict[str, DurableFunctionTestRunner] = {}
        self._lock = threading.Lock()
        # The modeled errors a boto3 Lambda client raises, so callers catch the same classes as on AWS.
        self.exceptions = boto3.session.Session().client("lambda", region_name="us-east-1").exceptions

    def is_durable(self, function_name: str) -> bool:
        try:
            return self._resolve(function_name) in self._runners
        except LookupError:
            return False

    def start(self, function_name: str, payload: str, name: str) -> str:
        """Start an execution of the function named `name` with `payload` (JSON text); its ARN."""
        logical_id = self._resolve(function_name)
        runner = self._runners[logical_id]
        with self._lock:
            started = self._started.get((logical_id, name))
            if started is not None:
                if started[0] != payload:
                    raise self.exceptions.DurableExecutionAlreadyStartedException(
                        {"Error": {"Code": "DurableExecutionAlreadyStartedException", "Message": name}}, "Invoke"
                    )
                return started[1]
            arn = runner.run_async(
                input=payload, execution_name=name, function_name=logical_id, execution_timeout=LOCAL_EXECUTION_TIMEOUT
            )
            self._started[(logical_id, name)] = (payload, arn)
            self._runner_of[arn] = runner
        return arn

    def stop(self, execution_arn: str, error_type: str = "", message: str = "") -> None:
        runner = self._runner_of.get(execution_arn)
        if runner is None:
            raise self.exceptions.ResourceNotFoundException(
                {"Error": {"Code": "ResourceNotFoundException", "Message": "no such execution"}},
                "StopDurableExecution",
            )
        # The runner has no public stop: its executor's is the service's StopDurableExecution.
        runner._executor.stop_execution(
            execution_arn, ErrorObject(message=message, type=error_type, data=None, stack_trace=None)
        )

    def answer(self, callback_id: str, result: bytes) -> None:
        """Complete a callback an execution waits on (SendDurableExecutionCallbackSuccess)."""
        for runner in self._runners.values():
            try:
                runner.send_callback_success(callback_id, result)
            except Exception:  # noqa: BLE001, S112 - another function's runner does not know the callback
                continue
            return
        raise self.exceptions.ResourceNotFoundException(
            {"Error": {"Code": "ResourceNotFoundException", "Message": "no such callback"}},
            "SendDurableExecutionCallbackSuccess",
        )

    def waiting_callback(self, execution_arn: str, timeout: int = 60) -> str:
        """The id of the callback the execution waits on, once it waits (TimeoutError after `timeout` seconds)."""
        return self._runner_of[execution_arn].wait_for_callback(execution_arn, timeout=timeout)

    def result(self, execution_arn: str, timeout: int = 60) -> DurableFunctionTestResult:
        """The execution's end, once it has ended (TimeoutError after `timeout` seconds)."""
        return self._runner_of[execution_arn].wait_for_result(execution_arn, timeout=timeout)

    def close(self) -> None:
        for runner in self._runners.values():
            runner.close()


class DurableLambdaClient:
    """The boto3 Lambda client calls a function makes of a durable function, answered by LocalDurableFunctions."""

    def __init__(self, functions: LocalDurableFunctions) -> None:
        self.functions = functions
        self.exceptions = functions.exceptions

    def invoke(
        self, *, FunctionName: str, Payload: bytes | str = b"{}", DurableExecutionName: str = "", **_: Any
    ) -> dict[str, Any]:
        text = Payload.decode() if isinstance(Payload, bytes) else Payload
        arn = self.functions.start(FunctionName, text, DurableExecutionName)
        return {"StatusCode": 202, "DurableExecutionArn": arn}

    def send_durable_execution_callback_success(self, *, CallbackId: str, Result: bytes = b"") -> dict[str, Any]:
        self.functions.answer(CallbackId, Result)
        return {}

    def stop_durable_execution(
        self, *, DurableExecutionArn: str, Error: dict[str, str] | None = None
    ) -> dict[str, Any]:
        error = Error or {}
        self.functions.stop(DurableExecutionArn, error.get("ErrorType", ""), error.get("ErrorMessage", ""))
        return {}
