"""The AWS calls each function makes on the local stack, recorded while it handles the event fixtures of
`events/`, are all in the list the IAM evaluation checks (tests/template/test_iam_evaluation.py
`function_calls`): a call added to the code and not to the list fails here, before the evaluator would miss it."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from botocore.client import BaseClient

from devstack.stack.template import ROOT
from mcp_backend.batch import StreamBatchStuck
from tests.iam.stacks import Stack
from tests.template.test_iam_evaluation import DATASETS, function_calls

EVENTS = ROOT / "events"
# The fixtures each function handles (ProbeWorker's needs a served endpoint, McpServer's an HTTP server: both
# are exercised by the e2e tier, and their calls are listed from their code).
FIXTURES = {
    "ToolWorker": "tool_worker",
    "CallLogAnalyzer": "call_log_analyzer",
    "DriftDetector": "monitor_table",
    "ExpiryRollup": "monitor_table",
    "ProbeDispatcher": "probe_dispatcher",
    "ProbeRecorder": "probe_recorder",
    "AlertHandler": "alert_handler",
}
# IAM authorizes a transaction per item action, a batch send as SendMessage
# (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/transaction-apis-iam.html).
TRANSACT_ITEM_ACTIONS = {"Put": "PutItem", "Update": "UpdateItem", "Delete": "DeleteItem", "ConditionCheck": "GetItem"}
OPERATION_ACTIONS = {("sqs", "SendMessageBatch"): "sqs:SendMessage", ("lambda", "Invoke"): "lambda:InvokeFunction"}


def actions_of(service: str, operation: str, params: dict[str, Any]) -> list[str]:
    prefix = {"monitoring": "cloudwatch"}.get(service, service)
    if (service, operation) == ("dynamodb", "TransactWriteItems"):
        return [f"dynamodb:{TRANSACT_ITEM_ACTIONS[next(iter(item))]}" for item in params["TransactItems"]]
    return [OPERATION_ACTIONS.get((service, operation), f"{prefix}:{operation}")]


@contextmanager
def recording() -> Iterator[set[str]]:
    """Every IAM action behind the AWS calls made in this process meanwhile."""
    recorded: set[str] = set()
    make_api_call = BaseClient._make_api_call

    def record(client: BaseClient, operation: str, params: dict[str, Any]) -> Any:
        recorded.update(actions_of(client.meta.service_model.service_name, operation, params))
        return make_api_call(client, operation, params)

    with mock.patch.object(BaseClient, "_make_api_call", record):
        yield recorded


@pytest.mark.parametrize("function", sorted(FIXTURES))
def test_every_call_a_function_makes_on_the_local_stack_is_in_the_evaluated_list(local, function):
    # Given the function's event fixtures
    fixtures = sorted(p for p in (EVENTS / FIXTURES[function]).glob("*.json") if not p.name.endswith(".state.json"))
    assert fixtures
    local.stack.create_all()  # the local stack's own calls (creating resources on demand) are not the function's
    # When it handles each on the local stack, its AWS calls recorded
    with recording() as recorded:
        for fixture in fixtures:
            # A stream consumer fails a batch on purpose (to bisect it); its calls were made all the same
            with contextlib.suppress(StreamBatchStuck):
                local.invoke(function, json.loads(Path(fixture).read_text()))
    # Then it called AWS, and every action it needed is one the IAM evaluation checks for it
    listed = {action for action, _, _ in function_calls(Stack("mcp", DATASETS))[function]}
    assert recorded, function
    assert recorded - listed == set(), function
