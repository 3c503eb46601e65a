"""End-to-end fixtures: a real local stack (moto server + Lambda API on loopback) per test, and the
MCP endpoint served by uvicorn on loopback, configured from the McpServer function's template
environment against the local stack (moto is active in-process, so the server thread uses it too)."""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import boto3
import pytest
import uvicorn

from devstack.ports import PortInUse, free_port
from devstack.runtime import procfs
from devstack.runtime.build_output import DEFAULT_BUILD_DIR
from devstack.runtime.execution_environment import ExecutionEnvironment
from devstack.runtime.runtime_image import LambdaRuntimeUnavailable
from devstack.server import DevStack, DevStackOptions
from devstack.stack.template import load_template

SEMANTICS_TEMPLATE = Path(__file__).parent / "semantics" / "template.yaml"


def process_states(env: ExecutionEnvironment) -> list[str]:
    """The state letter (/proc/<pid>/stat) of every process of the environment's process group."""
    assert env.process is not None
    return list(procfs.group_states(env.process.pid).values())


def wait_until(condition, seconds: float = 30.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


def free_port_block(count: int = 3) -> int:
    """The first of `count` consecutive loopback ports that are free now (make dev takes port, port+1 and
    port+2)."""
    while True:
        port = free_port()
        with contextlib.ExitStack() as probes:
            try:
                for offset in range(1, count):
                    probe = probes.enter_context(socket.socket())
                    probe.bind(("127.0.0.1", port + offset))
            except OSError:
                continue
            return port


# A running `make dev` records its endpoints in one file per checkout (devstack.running) for make invoke, fire,
# token and env-json: the tests that start one share an xdist group, so the tier's workers never run two at once.
MAKE_DEV_GROUP = pytest.mark.xdist_group("make-dev")


def start_make_dev(*options: str, ignoring_sigint: bool = False) -> tuple[subprocess.Popen[str], int, str]:
    """`python -m devstack dev` started on free ports and read up to its banner or its error line: the
    process, its AWS endpoint port and that line. Ports probed free can be taken before the stack binds
    them (the machine's other connections take ephemeral ports too): then it starts again on fresh ones."""
    for attempt in range(3):
        port = free_port_block()
        process = make_dev(port, *options, ignoring_sigint=ignoring_sigint)
        assert process.stdout is not None
        line = ""
        for line in process.stdout:
            if "local stack ready" in line or line.startswith("error:"):
                break
        if "already in use" in line and attempt < 2:
            process.wait(timeout=60)
            continue
        return process, port, line
    raise AssertionError("unreachable")


def make_dev(port: int, *options: str, ignoring_sigint: bool = False) -> subprocess.Popen[str]:
    """`python -m devstack dev` (what make dev runs) from the repository root, output as text on stdout;
    `ignoring_sigint`: started as a shell starts a background job or nohup a command, with SIGINT ignored."""
    root = Path(__file__).resolve().parents[2]
    return subprocess.Popen(
        [sys.executable, "-m", "devstack", "dev", "--port", str(port), *options],
        cwd=root,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONPATH": f"{root / 'layers' / 'shared'}:{root}"},
        preexec_fn=(lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if ignoring_sigint else None,
    )


class ManualClock:
    """The stack's notion of now, moved by the test (event age, record age, TTL, schedules)."""

    def __init__(self) -> None:
        self.now = dt.datetime.now(dt.UTC)

    def __call__(self) -> dt.datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += dt.timedelta(seconds=seconds)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


# The runtime the product stack's functions run in: `make test` sets lambda (the build output in
# Lambda-shaped sandboxes, DEVSTACK_BUILD_DIR); a bare pytest run imports them in-process.
PRODUCT_RUNTIME = os.environ.get("DEVSTACK_RUNTIME", "inprocess")
BUILD_DIR = Path(os.environ.get("DEVSTACK_BUILD_DIR", DEFAULT_BUILD_DIR))


def require_build(*paths: Path) -> None:
    """A test that reads the build output skips, saying how to get one, when there is none; CI must have it."""
    missing = [path for path in paths if not path.exists()]
    if not missing:
        return
    reason = f"no build at {missing[0]}: run `make build-local` (make test does) and set DEVSTACK_BUILD_DIR to it"
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture
def start_stack(clock) -> Iterator[Callable[..., DevStack]]:
    started: list[DevStack] = []

    def start(
        template: Path | None = None, runtime: str | None = None, aws_port_override: int | None = None, **options
    ) -> DevStack:
        # The semantics template's functions are never built: they always run in-process.
        runtime = runtime or ("inprocess" if template else PRODUCT_RUNTIME)
        run_threads = options.pop("run_threads", False)  # True: the event sources run as in make dev
        lambda_port, web_port = options.pop("lambda_port", None), options.pop("web_port", None)
        # A port probed free can be taken before the stack binds it (a shared machine): try fresh ports.
        for attempt in range(3):
            stack = DevStack(
                DevStackOptions(
                    aws_port=aws_port_override or free_port(),
                    lambda_port=lambda_port or free_port(),
                    web_port=web_port or free_port(),
                    template=load_template(template) if template else None,
                    run_threads=run_threads,
                    retry_delays=(0.0,),
                    clock=clock,
                    runtime=runtime,
                    build_dir=BUILD_DIR,
                    prewarm=False,
                    **options,
                )
            )
            try:
                started.append(stack.start())
                # A client's first request should not race a cold start against its own timeout.
                stack.prewarm(web.spec.logical_id for web in stack.web_functions.values())
                return stack
            except PortInUse:
                if attempt == 2:
                    raise
            except LambdaRuntimeUnavailable as missing:
                # CI must run the Lambda runtime; a laptop without one is told how to get it.
                if os.environ.get("CI"):
                    raise
                pytest.skip(f"the Lambda runtime is unavailable here: {missing}")
        raise AssertionError("unreachable")

    yield start
    for stack in started:
        if not stack.stopped:
            stack.stop()


@pytest.fixture
def semantics(start_stack) -> DevStack:
    """The test-only template with one function per emulated event-source semantic."""
    return start_stack(SEMANTICS_TEMPLATE)


# Small enough that a test sees several keepalives; the template's default is 15 s.
TEST_KEEPALIVE_SECONDS = "0.2"
ALLOWED_ORIGIN = "http://localhost:6274"  # MCP Inspector's default origin


@dataclass
class Endpoint:
    url: str
    alice_key: str
    bob_key: str
    local: object

    def headers(self, key: str | None = None, **extra: str) -> dict[str, str]:
        headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
        if key is not None:
            headers["authorization"] = f"Bearer {key}"
        return {**headers, **extra}


def serve(app) -> tuple[uvicorn.Server, threading.Thread, int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.01)
    return server, thread, sock.getsockname()[1]


def mcp_environment(local, **overrides: str) -> dict[str, str]:
    """McpServer's declared environment, plus what the Lambda runtime and the local stack add."""
    spec = local.stack.function("McpServer")
    return {
        **spec.environment,
        "AWS_REGION": local.stack.region,
        "AWS_LAMBDA_FUNCTION_NAME": spec.name,
        # Only the local stack sets these: the loopback host, a small keepalive, an allowed browser origin.
        "MCP_ALLOWED_HOSTS": "127.0.0.1:*,localhost:*",
        "MCP_ALLOWED_ORIGINS": ALLOWED_ORIGIN,
        "SSE_KEEPALIVE_SECONDS": TEST_KEEPALIVE_SECONDS,
        **overrides,
    }


@pytest.fixture
def endpoint_factory(local, monkeypatch) -> Iterator:
    running = []

    def start(**overrides: str) -> Endpoint:
        # The process environment is the function's, as on Lambda, before the app's modules load.
        environment = mcp_environment(local, **overrides)
        for name, value in environment.items():
            monkeypatch.setenv(name, value)
        from mcp_backend.api_keys import add_api_key
        from mcp_backend.config import McpSettings
        from mcp_backend.mcp.server import create_app

        secrets = boto3.client("secretsmanager")
        secret_id = environment["API_KEYS_SECRET_ID"]
        alice = add_api_key(secrets, secret_id, "user-alice", "pro")
        bob = add_api_key(secrets, secret_id, "user-bob", "free")
        server, thread, port = serve(create_app(McpSettings.model_validate(environment)))
        running.append((server, thread))
        return Endpoint(f"http://127.0.0.1:{port}/mcp", alice, bob, local)

    yield start
    for server, thread in running:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture
def endpoint(endpoint_factory) -> Endpoint:
    return endpoint_factory()


@asynccontextmanager
async def mcp_client(endpoint: Endpoint, mode: str, key: str | None = None):
    """The SDK's own client over Streamable HTTP, in the given protocol era."""
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    async with create_mcp_http_client(headers={"authorization": f"Bearer {key or endpoint.alice_key}"}) as http:
        async with Client(streamable_http_client(endpoint.url, http_client=http), mode=mode) as client:
            yield client
