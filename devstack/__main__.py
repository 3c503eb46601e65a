"""`python -m devstack dev|fire|env-json` (what `make dev`, `make fire` and `make env-json` run).

dev:      the whole template on 127.0.0.1 until Ctrl-C.
fire:     fire a schedule of the running stack now.
env-json: the running stack's --env-vars file for `sam local invoke`.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
import time
import warnings
from pathlib import Path

import boto3
import httpx

from devstack.ports import PortInUse
from devstack.redrive import redrive_running_stack
from devstack.running_stack import SAM_ENV_FILE, announce, running_stack, withdraw
from devstack.runtime.build_output import DEFAULT_BUILD_DIR
from devstack.runtime.runtime_image import LambdaRuntimeUnavailable
from devstack.server import DevStack, DevStackOptions, install_log_prefixes
from devstack.stack.cognito import machine_clients
from devstack.stack.cognito_login import seed_login_user
from devstack.traces import DEFAULT_TRACE_FILE, find_traces, read_trace, tree_header, tree_lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devstack")
    commands = parser.add_subparsers(dest="command", required=True)
    dev = commands.add_parser("dev", help="run the local stack until Ctrl-C")
    dev.add_argument(
        "--port", type=int, default=4566, help="AWS endpoint port; the Lambda API uses port+1, the MCP endpoint port+2"
    )
    dev.add_argument("--state", type=Path, help="keep tables and queues in this folder between runs")
    dev.add_argument("--fresh", action="store_true", help="start empty even if --state holds data")
    dev.add_argument("--parameter", action="append", default=[], metavar="Name=Value", help="template parameter")
    dev.add_argument(
        "--runtime",
        choices=["inprocess", "lambda"],
        default="inprocess",
        help="inprocess: import each function here; lambda: run the build output in Lambda-shaped sandboxes",
    )
    dev.add_argument("--build-dir", type=Path, default=DEFAULT_BUILD_DIR, help="sam build output (lambda runtime)")
    dev.add_argument(
        "--conformance-fixtures",
        action="store_true",
        help="the endpoint also serves the MCP conformance suite's fixtures (in-process runtime)",
    )
    trace = commands.add_parser("trace", help="a trace of the local stack as a tree with durations")
    trace.add_argument("trace_id", nargs="?", help="the trace id (W3C, or X-Ray's 1-xxxxxxxx-...)")
    trace.add_argument("--job", help="the trace of this job id instead")
    trace.add_argument("--file", type=Path, default=DEFAULT_TRACE_FILE, help="the span file make dev writes")
    fire = commands.add_parser("fire", help="fire a schedule of the running stack now")
    fire.add_argument("schedule", help="logical id of the schedule (AWS::Events::Rule or AWS::Scheduler::Schedule)")
    token = commands.add_parser("token", help="an OAuth access token from the running stack (make dev AUTH=oauth)")
    token.add_argument("--scope", default="", help="space-separated scopes (default: all the client may have)")
    redrive = commands.add_parser("redrive", help="move the running stack's job DLQ back to JobQueue")
    redrive.add_argument("--dry-run", action="store_true", help="list what would move; move nothing")
    env_json = commands.add_parser("env-json", help="the running stack's --env-vars file for `sam local invoke`")
    env_json.add_argument("--output", type=Path, default=SAM_ENV_FILE, help="where to write it")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    for chatty in ("botocore", "httpx", "werkzeug"):
        logging.getLogger(chatty).setLevel(logging.WARNING)
    # Functions flush their own per-job metrics; the empty end-of-invocation flush is not news.
    warnings.filterwarnings("ignore", message="No application metrics to publish")
    if args.command == "fire":
        return fire_schedule(args.schedule)
    if args.command == "token":
        return print_token(args.scope)
    if args.command == "env-json":
        return write_sam_env_vars(args.output)
    if args.command == "trace":
        return print_trace(args.file, args.trace_id, args.job)
    if args.command == "redrive":
        endpoints = running_stack()
        if endpoints is None:
            print("error: no local stack is running; start one with `make dev`, or give STACK=<name>", file=sys.stderr)
            return 2
        return redrive_running_stack(endpoints["aws"], args.dry_run)
    return run_dev(args)


def print_trace(path: Path, trace_id: str | None, job_id: str | None) -> int:
    """`make trace ID=<trace id>` (or `JOB=<job id>`): the trace's spans as a tree, each with its duration and
    its start after the trace's first span."""
    if job_id:
        found = find_traces(path, "job.id", job_id)
        if not found:
            print(f"error: no span in {path} names job {job_id}", file=sys.stderr)
            return 1
        trace_id = found[-1]
    if not trace_id:
        print("error: give a trace id (ID=...) or a job id (JOB=...)", file=sys.stderr)
        return 2
    spans = read_trace(path, trace_id)
    if not spans:
        print(f"error: no span of trace {trace_id} in {path}", file=sys.stderr)
        return 1
    print(f"trace {spans[0]['traceId']}: {len(spans)} spans")
    print(tree_header(spans))
    print("\n".join(tree_lines(spans)))
    return 0


def write_sam_env_vars(output: Path) -> int:
    """The running stack's values of every variable the template declares, as `sam local invoke --env-vars` reads
    them (https://docs.aws.amazon.com/serverless-application-model/latest/developerguide/serverless-sam-cli-using-invoke.html)."""
    endpoints = running_stack()
    if endpoints is None:
        print("error: no local stack is running; start one with `make dev`", file=sys.stderr)
        return 2
    variables = httpx.get(f"{endpoints['lambda']}/devstack/sam-env-vars", timeout=10).raise_for_status().json()
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(variables, indent=2, sort_keys=True) + "\n")
    print(f"wrote {output} ({len(variables)} functions)")
    return 0


def dev_parameters(runtime: str, given: list[str]) -> dict[str, str]:
    """The template parameters `make dev` runs with: the `--parameter Name=Value` given, and Tracing=otlp unless one
    says otherwise, so the stack records spans (devstack.traces); the Lambda runtime keeps the template's default
    (off): its sandboxes would export to a collector that is not there."""
    defaults = {"Tracing": "otlp"} if runtime == "inprocess" else {}
    return {**defaults, **dict(item.split("=", 1) for item in given)}


def run_dev(args: argparse.Namespace) -> int:
    if args.state and args.fresh:
        (args.state / "state.json").unlink(missing_ok=True)
    options = DevStackOptions(
        aws_port=args.port,
        lambda_port=args.port + 1,
        web_port=args.port + 2,
        state_dir=args.state,
        parameters=dev_parameters(args.runtime, args.parameter),
        trace_file=DEFAULT_TRACE_FILE,
        runtime=args.runtime,
        build_dir=args.build_dir,
        conformance_fixtures=args.conformance_fixtures,
    )
    started = time.perf_counter()
    # Ctrl-C is how the stack is stopped, even when whoever started it had SIGINT ignored (a shell's background
    # job, nohup), which Python then leaves ignored: uvicorn installs its handlers the same way.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    install_log_prefixes()
    stack = DevStack(options)
    try:
        stack.start()
    except (PortInUse, LambdaRuntimeUnavailable) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    ready_seconds = time.perf_counter() - started
    # From here a Ctrl-C stops the running stack, even one that comes while the banner is being written.
    try:
        dev_keys = stack.dev_keys = issue_dev_keys(stack)
        login_user = seed_login_user(stack.client("cognito-idp"))
        urls = {web.spec.logical_id: web.url for web in stack.web_functions.values()}
        announce(stack.aws_url, stack.lambda_url, stack.options.runtime, urls)
        print(banner(stack, ready_seconds, dev_keys, login_user), flush=True)
        stopping.wait()  # Ctrl-C interrupts the wait (KeyboardInterrupt); SIGTERM sets the event
    except KeyboardInterrupt:
        pass
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the shutdown short
    print("\nstopping the local stack ...", flush=True)
    withdraw()
    stack.stop()
    print("stopped.", flush=True)
    return 0


def issue_dev_keys(stack: DevStack) -> dict[str, str]:
    """A fresh API key for each served endpoint that authenticates with the ApiKeysSecret scheme."""
    for web in stack.web_functions.values():  # the key format is the layer's: import it from there
        for layer in web.spec.layer_dirs:
            if layer.is_dir() and str(layer) not in sys.path:
                sys.path.insert(0, str(layer))
    from mcp_backend.api_keys import add_api_key

    keys = {}
    for url_id, web in stack.web_functions.items():
        secret = web.spec.environment.get("API_KEYS_SECRET_ID")
        if secret and web.spec.environment.get("AUTH_MODE", "apikey") != "oauth":  # oauth: keys are refused
            keys[url_id] = add_api_key(stack.client("secretsmanager"), secret, user_id="dev-user", tier="pro")
    return keys


def banner(
    stack: DevStack,
    ready_seconds: float,
    dev_keys: dict[str, str] | None = None,
    login_user: tuple[str, str] | None = None,
) -> str:
    resources = stack.environment.stack.created
    counts: dict[str, int] = {}
    for logical_id in resources:
        kind = stack.template.resource(logical_id)["Type"].split("::", 1)[1]
        counts[kind] = counts.get(kind, 0) + 1
    # The stack's own authorization server (AuthorizationServerMode builtin): its URL is an issuer, not an endpoint.
    issuers = {
        url_id: web.url
        for url_id, web in stack.web_functions.items()
        if "AUTHORIZATION_TABLE_NAME" in web.spec.environment
    }
    lines = [
        "",
        f"local stack ready in {ready_seconds:.1f} s (127.0.0.1 only)",
        f"  runtime:              {runtime_line(stack)}",
        f"  AWS endpoint (moto):  {stack.aws_url}    export AWS_ENDPOINT_URL={stack.aws_url}",
        f"  Lambda Invoke API:    {stack.lambda_url}",
        *(
            f"  {web.spec.logical_id + ' URL:':<22}{web.url}/mcp"
            + (f"    dev API key (user dev-user): {dev_keys[url_id]}" if dev_keys and url_id in dev_keys else "")
            for url_id, web in stack.web_functions.items()
            if url_id not in issuers
        ),
        *(
            f"  authorization server: {issuers[url_id]}    (issuer; RFC 8414 metadata, DCR, login)"
            for url_id in issuers
        ),
        "  resources:            " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())),
        f"  functions:            {', '.join(sorted(stack.environment.stack.functions()))}",
    ]
    served = [(url_id, web) for url_id, web in stack.web_functions.items() if url_id in (dev_keys or {})]
    if served and dev_keys:
        url_id, web = served[0]
        call = json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {
                    "name": "submit_analysis",
                    "arguments": {"dataset_url": "s3://local-datasets/apikey%3Adev-user/sales.csv"},
                },
            }
        )
        lines.append(
            f"  submit a job:         curl -s {web.url}/mcp -H 'Authorization: Bearer {dev_keys[url_id]}' "
            "-H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' "
            f"-d '{call}'"
        )
    elif "JobQueue" in resources:
        job = json.dumps(
            {
                "jobId": "job-example-0001",
                "userId": "dev-user",
                "tool": "analyze_dataset",
                "input": {"dataset_url": "s3://local-datasets/dev-user/sales.csv"},
            }
        )
        lines.append(
            "  submit a job:         AWS_ENDPOINT_URL="
            f"{stack.aws_url} aws sqs send-message --queue-url {stack.environment.queue_url('JobQueue')} "
            f"--message-body '{job}'"
        )
    # With the stack's own authorization server the pool's client-credentials tokens are not the endpoint's.
    for client_id, secret in [] if issuers else machine_clients(stack.client("cognito-idp")):
        lines.append(
            f"  OAuth access token:   make token    or: curl -s -u {client_id}:{secret} -d "
            f"grant_type=client_credentials {stack.lambda_url}/oauth2/token    (then Authorization: Bearer <token>)"
        )
    if login_user is not None:
        lines.append(
            f"  OAuth sign-in:        user {login_user[0]}, password {login_user[1]} (local Cognito login page); "
            "an MCP client given the endpoint URL registers itself and opens it"
        )
    if stack.schedules:
        lines.append(f"  fire a schedule now:  make fire SCHEDULE={next(iter(stack.schedules))}")
    lines.append("  invoke one function:  make invoke FUNCTION=ToolWorker EVENT=events/tool_worker/healthy-batch.json")
    for notice in stack.notices:
        lines.append(f"  not emulated:         {notice}")
    for error in stack.broken_functions.values():
        lines.append(f"  failed to start:      {error}")
    lines.append("  stop:                 Ctrl-C")
    return "\n".join(lines)


def runtime_line(stack: DevStack) -> str:
    runtime = stack.environment.lambda_runtime
    if runtime is None:
        return "in-process (source folders imported here; RUNTIME=lambda runs the build output as Lambda does)"
    where = (
        "Lambda-shaped sandboxes"
        if runtime.image.namespaces
        else "emulated paths (no namespaces: read-only code unproven)"
    )
    return f"lambda: {stack.options.build_dir} in {where}, awslambdaric, {runtime.image.python}"


def fire_schedule(schedule: str) -> int:
    endpoints = running_stack()
    if endpoints is None:
        print("error: no local stack is running; start one with `make dev`", file=sys.stderr)
        return 2
    response = httpx.post(f"{endpoints['lambda']}/devstack/schedules/{schedule}/fire", timeout=30)
    print(response.text)
    return 0 if response.is_success else 1


def print_token(scope: str) -> int:
    """`make token`: a client-credentials access token from the running stack's local token endpoint."""
    endpoints = running_stack()
    if endpoints is None:
        print("error: no local stack is running; start one with `make dev AUTH=oauth`", file=sys.stderr)
        return 2
    cognito = boto3.client(
        "cognito-idp",
        endpoint_url=endpoints["aws"],
        region_name="us-east-1",
        aws_access_key_id="local",
        aws_secret_access_key="local",  # noqa: S106 - moto accepts any credentials
    )
    clients = machine_clients(cognito)
    if not clients:
        print("error: the running stack has no OAuth client; start it with `make dev AUTH=oauth`", file=sys.stderr)
        return 2
    client_id, secret = clients[0]
    form = {"grant_type": "client_credentials", **({"scope": scope} if scope else {})}
    response = httpx.post(f"{endpoints['lambda']}/oauth2/token", data=form, auth=(client_id, secret), timeout=10)
    if not response.is_success:
        print(f"error: {response.text}", file=sys.stderr)
        return 1
    print(response.json()["access_token"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
