"""`make invoke FUNCTION=<LogicalId> EVENT=events/<function>/<file>.json`: the no-Docker twin of
`sam local invoke`. With `make dev` running, the function runs there (against that stack's state,
through its Lambda Invoke API, in the runtime `RUNTIME=` names, else the stack's own); otherwise on a fresh
stack created from template.yaml (the same stack `make dev` starts, on free loopback ports, stopped
afterwards), in-process or, with `RUNTIME=lambda`, from the build output in the Lambda runtime.

A fixture that needs state declares it beside itself, in `<fixture>.state.json` (devstack.fixture_state), and
`make invoke` seeds it first, in whichever stack runs the function. A Function URL request (payload format
2.0) to a web-adapter function is sent to the function's served URL, as the Web Adapter would relay it, with a
key the stack issued when the request carries none; the answer is printed as the Function URL would return it.
A running stack serves its URLs in its own runtime: `RUNTIME=` naming another one is refused for them.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
from pathlib import Path
from typing import Any

import httpx

from devstack.__main__ import issue_dev_keys
from devstack.fixture_state import seed
from devstack.ports import free_port
from devstack.running_stack import running_stack
from devstack.runtime.build_output import DEFAULT_BUILD_DIR
from devstack.runtime.function_errors import FunctionError
from devstack.runtime.in_process import HandlerImportError
from devstack.runtime.runtime_image import LambdaRuntimeUnavailable
from devstack.server import DevStack, DevStackOptions

# Request headers the Function URL and the adapter own: never relayed from the event.
_NOT_RELAYED = {"content-length", "host", "connection", "transfer-encoding"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make invoke", description=__doc__)
    parser.add_argument("function", help="logical id in template.yaml, e.g. ToolWorker")
    parser.add_argument("event", type=Path, help="event fixture, e.g. events/tool_worker/healthy-batch.json")
    parser.add_argument(
        "--runtime", choices=["inprocess", "lambda"], help="default: the running stack's, else inprocess"
    )
    parser.add_argument("--build-dir", type=Path, default=DEFAULT_BUILD_DIR)
    parser.add_argument("--fresh", action="store_true", help="a fresh stack even when `make dev` is running")
    args = parser.parse_args(argv)

    for name, value in {
        "AWS_ACCESS_KEY_ID": "local",
        "AWS_SECRET_ACCESS_KEY": "local",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        os.environ.setdefault(name, value)
    event = json.loads(args.event.read_text())
    state_file = args.event.with_name(args.event.stem + ".state.json")
    state = json.loads(state_file.read_text()) if state_file.exists() else {}

    endpoints = None if args.fresh else running_stack()
    if endpoints is not None:
        return invoke_running(endpoints, args.function, event, state, args.runtime)
    return invoke_fresh(parser, args.function, event, state, args.runtime or "inprocess", args.build_dir)


def fresh_stack(runtime: str, build_dir: Path) -> DevStack:
    """The stack `make dev` starts, on free loopback ports, without its event-source threads (started here)."""
    options = DevStackOptions(
        aws_port=free_port(),
        lambda_port=free_port(),
        web_port=free_port(),
        run_threads=False,
        runtime=runtime,
        build_dir=build_dir,
        prewarm=False,
    )
    return DevStack(options).start()


def invoke_on(stack: DevStack, function: str, event: Any, state: dict, keys: dict[str, str]) -> Any:
    """Seed the fixture's state, then invoke: a Function URL request goes to the function's served URL."""
    seed(stack.environment, stack.web_functions, stack.client, state, next(iter(keys.values()), None))
    if state.get("endpoints"):
        # The fixture calls the stack's own endpoint: its environment starts now, not inside the call's timeout.
        stack.prewarm(web.spec.logical_id for web in stack.web_functions.values())
    web = next((w for w in stack.web_functions.values() if w.spec.logical_id == function), None)
    if web is not None:
        return function_url_request(web.url, event, next(iter(keys.values()), None))
    return stack.environment.invoke(function, event)


def invoke_fresh(
    parser: argparse.ArgumentParser, function: str, event: Any, state: dict, runtime: str, build_dir: Path
) -> int:
    try:
        stack = fresh_stack(runtime, build_dir)
    except LambdaRuntimeUnavailable as missing:
        print(f"error: the Lambda runtime is unavailable here: {missing}", file=sys.stderr)
        return 2
    try:
        functions = sorted(stack.environment.stack.functions())
        if function not in functions:
            parser.error(f"{function} is not a function in template.yaml: {functions}")
        response = invoke_on(stack, function, event, state, issue_dev_keys(stack))
    except HandlerImportError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except FunctionError as error:  # the Lambda runtime's error document, as Lambda returns it
        print(json.dumps(error.document, indent=2))
        return 1
    except Exception as error:  # noqa: BLE001 - shown the way Lambda reports an unhandled error
        print(json.dumps({"errorType": type(error).__name__, "errorMessage": str(error)}, indent=2))
        return 1
    finally:
        stack.stop()
    print(json.dumps(response, indent=2, default=str))
    return 0


def function_url_request(url: str, event: dict, api_key: str | None) -> dict[str, Any]:
    """A Function URL event (payload format 2.0) as an HTTP request to the served app; its answer in the
    Function URL response shape."""
    headers = {k: v for k, v in (event.get("headers") or {}).items() if k.lower() not in _NOT_RELAYED}
    if api_key and not any(k.lower() == "authorization" for k in headers):
        headers["authorization"] = f"Bearer {api_key}"
    body = event.get("body") or ""
    content = base64.b64decode(body) if event.get("isBase64Encoded") else body.encode()
    query = event.get("rawQueryString") or ""
    target = f"{url}{event.get('rawPath', '/')}" + (f"?{query}" if query else "")
    method = event.get("requestContext", {}).get("http", {}).get("method", "GET")
    answer = httpx.request(method, target, headers=headers, content=content, timeout=60)
    return {"statusCode": answer.status_code, "headers": dict(answer.headers), "body": answer.text}


def invoke_running(endpoints: dict[str, Any], function: str, event: Any, state: dict, runtime: str | None) -> int:
    """In the running stack (its logs appear in `make dev`): the fixture's state seeded there first, then a
    Function URL request to the URL it serves, or a RequestResponse invocation through its Lambda API."""
    url = endpoints.get("urls", {}).get(function)
    served_in = endpoints.get("runtime", "inprocess")
    if url is not None and runtime and runtime != served_in:
        print(
            f"error: the running stack serves {function}'s Function URL in its {served_in} runtime; "
            f"RUNTIME={runtime} needs `make dev RUNTIME={runtime}` or FRESH=1",
            file=sys.stderr,
        )
        return 2
    prepared = httpx.post(f"{endpoints['lambda']}/devstack/fixture", json=state, timeout=60).raise_for_status().json()
    if url is not None:
        response = function_url_request(url, event, prepared.get("apiKey"))
        print(f"{function} answered on the running stack's URL {url}", file=sys.stderr)
        print(json.dumps(response, indent=2))
        return 0
    headers = {"X-Devstack-Runtime": runtime} if runtime else {}
    answer = httpx.post(
        f"{endpoints['lambda']}/2015-03-31/functions/{function}/invocations",
        content=json.dumps(event),
        headers=headers,
        timeout=None,  # noqa: S113 - the function's own timeout bounds the call
    )
    if answer.status_code == 404:
        print(f"error: {function} is not a function of the running stack", file=sys.stderr)
        return 2
    answer.raise_for_status()
    ran_in = answer.headers.get("X-Devstack-Runtime", "")
    print(f"{function} ran in the running stack ({endpoints['lambda']}), {ran_in} runtime", file=sys.stderr)
    print(json.dumps(answer.json(), indent=2))
    return 1 if answer.headers.get("X-Amz-Function-Error") else 0


if __name__ == "__main__":
    sys.exit(main())
