"""`make invoke FUNCTION=<LogicalId> EVENT=events/<function>/<file>.json`: the no-Docker twin of
`sam local invoke`. With `make dev` running, the function runs there (against that stack's state,
through its Lambda Invoke API); otherwise in this process, with the handler, environment and
timeout its template entry declares, against a fresh stack created from template.yaml on moto.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import boto3
from moto import mock_aws

from devstack.environment import LocalEnvironment
from devstack.running import running_stack
from devstack.runtime import HandlerImportError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make invoke", description=__doc__)
    parser.add_argument("function", help="logical id in template.yaml, e.g. ToolWorker")
    parser.add_argument("event", type=Path, help="event fixture, e.g. events/tool_worker/healthy-batch.json")
    args = parser.parse_args(argv)

    for name, value in {
        "AWS_ACCESS_KEY_ID": "local",
        "AWS_SECRET_ACCESS_KEY": "local",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        os.environ.setdefault(name, value)
    event = json.loads(args.event.read_text())

    endpoints = running_stack()
    if endpoints is not None:
        return invoke_running(endpoints, args.function, event)

    with mock_aws():
        # The stubs overload boto3.client per literal service name; the environment passes a runtime string.
        environment = LocalEnvironment(boto3.client)  # type: ignore[arg-type]
        environment.seed_datasets()
        if args.function not in environment.stack.functions():
            parser.error(f"{args.function} is not a function in template.yaml: {sorted(environment.stack.functions())}")
        try:
            response = environment.invoke(args.function, event)
        except HandlerImportError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
        except Exception as error:  # noqa: BLE001 - shown the way Lambda reports an unhandled error
            print(json.dumps({"errorType": type(error).__name__, "errorMessage": str(error)}, indent=2))
            return 1
        print(json.dumps(response, indent=2, default=str))
    return 0


def invoke_running(endpoints: dict[str, str], function: str, event: dict) -> int:
    """RequestResponse through the running stack's Lambda API (its logs appear in `make dev`)."""
    client = boto3.client("lambda", endpoint_url=endpoints["lambda"], region_name="us-east-1")
    try:
        response = client.invoke(FunctionName=function, Payload=json.dumps(event))
    except client.exceptions.ResourceNotFoundException:
        print(f"error: {function} is not a function of the running stack", file=sys.stderr)
        return 2
    print(json.dumps(json.loads(response["Payload"].read()), indent=2))
    return 1 if response.get("FunctionError") else 0


if __name__ == "__main__":
    sys.exit(main())
