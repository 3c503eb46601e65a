"""Nothing AWS-bound at import time: loading every function's handler module (what a cold start pays
before the first event) makes no AWS API call and builds no AWS client (clients are built on first use,
so a cold start pays only for the clients its first event needs)."""

from __future__ import annotations

import boto3
import botocore.client
import pytest

from devstack.runtime.in_process import FunctionRuntime
from devstack.stack.template import load_template

FUNCTIONS = sorted(
    logical_id
    for logical_id, function in load_template().resources("AWS::Lambda::Function").items()
    if not function["Properties"]["Handler"].endswith(".sh")  # web-adapter start scripts are not Python modules
)


@pytest.mark.parametrize("function_id", FUNCTIONS)
def test_loading_the_handler_makes_no_aws_call(aws, monkeypatch, function_id):
    # Given the function as the template declares it, and every AWS API call recorded
    from devstack.stack.resources import LocalStack

    spec = LocalStack(boto3.client).create_all().function(function_id)
    calls: list[str] = []
    clients: list[str] = []
    real_call = botocore.client.BaseClient._make_api_call
    real_init = botocore.client.BaseClient.__init__

    def recording(client, operation, params):
        calls.append(f"{client.meta.service_model.service_name}.{operation}")
        return real_call(client, operation, params)

    def recording_init(client, *args, **kwargs):
        real_init(client, *args, **kwargs)
        clients.append(client.meta.service_model.service_name)

    monkeypatch.setattr(botocore.client.BaseClient, "_make_api_call", recording)
    monkeypatch.setattr(botocore.client.BaseClient, "__init__", recording_init)

    # When its handler module is imported (a fresh module, as in a new execution environment)
    handler = FunctionRuntime(spec, "us-east-1").handler()

    # Then it is callable, no AWS API was called and no AWS client was built
    assert callable(handler)
    assert calls == []
    # Not even the X-Ray sampling client: functions carry no tracing SDK (Lambda's own segments need none).
    assert clients == []
