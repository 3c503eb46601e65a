"""Function URLs of web-adapter functions, served on loopback by uvicorn.

On Lambda the Lambda Web Adapter runs the function's start script and forwards Function URL
requests to the ASGI server it starts. Locally the stack reads the same script for the app it
names (`uvicorn [--factory] module:attribute`), builds it inside the function's declared
environment, and serves it on 127.0.0.1. Of the adapter's hop only the header that carries the invocation's
request context is played: each request gets `x-amzn-request-context`, as the adapter passes the Function URL
event's requestContext (https://github.com/awslabs/aws-lambda-web-adapter, README), with its own request id and
the address the request came from as `http.sourceIp`
(https://docs.aws.amazon.com/lambda/latest/dg/urls-invocation.html#urls-payloads).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import re
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import uvicorn

from devstack.runtime.in_process import function_environment
from devstack.runtime.running_function import running
from devstack.stack.resources import FunctionSpec

_UVICORN_TARGET = re.compile(r"uvicorn\s+(?P<flags>(?:--?\S+\s+)*)(?P<target>[\w.]+:[\w]+)")


class NotAWebFunction(Exception):
    pass


class _QuietServer(uvicorn.Server):
    """uvicorn's main loop wakes 10 times a second to refresh its Date header and to notice should_exit; at
    rest that is most of what the in-process endpoint costs. This one wakes once a second (the Date header's
    resolution) and stop() wakes it at once."""

    _wake: asyncio.Event | None = None
    _loop: asyncio.AbstractEventLoop | None = None

    async def main_loop(self) -> None:
        self._loop, self._wake = asyncio.get_running_loop(), asyncio.Event()
        ticks = 0
        while not await self.on_tick(ticks):
            ticks += 10  # uvicorn counts tenths of a second: a multiple of 10 refreshes the Date header
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=1)

    def exit_now(self) -> None:
        self.should_exit = True
        if self._loop is not None and self._wake is not None:
            with contextlib.suppress(RuntimeError):  # the loop already ended
                self._loop.call_soon_threadsafe(self._wake.set)


@dataclass
class WebFunction:
    spec: FunctionSpec
    url: str
    server: Any
    thread: threading.Thread


REQUEST_CONTEXT_HEADER = b"x-amzn-request-context"


def with_request_context(scope: dict[str, Any], request_id: str) -> list[tuple[bytes, bytes]]:
    """The request's headers with the adapter's `x-amzn-request-context` for this invocation (a client's own
    header of that name is dropped, as the adapter replaces it): the Function URL request context's fields the
    apps read, the source being the peer of the connection, as Lambda sees it (never X-Forwarded-For)."""
    headers: list[tuple[bytes, bytes]] = list(scope["headers"])
    user_agent = next((v.decode("latin-1") for k, v in headers if k.lower() == b"user-agent"), "")
    client = scope.get("client")
    now = time.time()
    context = {
        "requestId": request_id,
        "routeKey": "$default",
        "stage": "$default",
        "time": time.strftime("%d/%b/%Y:%H:%M:%S +0000", time.gmtime(now)),
        "timeEpoch": int(now * 1000),
        "http": {
            "method": scope.get("method", "GET"),
            "path": scope.get("path", "/"),
            "protocol": f"HTTP/{scope.get('http_version', '1.1')}",
            "sourceIp": client[0] if client else "127.0.0.1",
            "userAgent": user_agent,
        },
    }
    encoded = json.dumps(context, separators=(",", ":")).encode()
    return [(k, v) for k, v in headers if k.lower() != REQUEST_CONTEXT_HEADER] + [(REQUEST_CONTEXT_HEADER, encoded)]


class InvocationPerRequest:
    """ASGI: every HTTP request is one invocation with a request id of its own, as behind a Function URL, run
    as `spec`'s (its spans carry the function's resource: devstack.runtime.running_function)."""

    def __init__(self, app: Any, spec: FunctionSpec | None = None) -> None:
        self.app = app
        self.spec = spec

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        scope = {**scope, "headers": with_request_context(scope, str(uuid.uuid4()))}
        if self.spec is None:
            await self.app(scope, receive, send)
            return
        with running(self.spec):
            await self.app(scope, receive, send)


def app_target(spec: FunctionSpec) -> tuple[str, bool]:
    """(module:attribute, is_factory) from the function's start script."""
    script = spec.code_dir / spec.handler
    if not spec.handler.endswith(".sh") or not script.exists():
        raise NotAWebFunction(f"{spec.logical_id}: handler {spec.handler} is not a web-adapter start script")
    match = _UVICORN_TARGET.search(script.read_text())
    if match is None:
        raise NotAWebFunction(f"{spec.logical_id}: {spec.handler} does not start uvicorn with an app target")
    return match.group("target"), "--factory" in match.group("flags")


def serve(
    spec: FunctionSpec,
    listener: socket.socket,
    region: str,
    overrides: dict[str, str],
    door: Callable[[Any], Any] = lambda app: app,
    factory_target: str | None = None,
) -> WebFunction:
    """The function's app on the listener, each request an invocation; `door` wraps the app as the URL's AuthType
    does (an AWS_IAM URL checks SigV4 first: devstack.front_doors.iam_urls). `factory_target` (module:factory)
    builds the app instead of the start script's target: the local stack's own variant of a function's app."""
    target, factory = (factory_target, True) if factory_target else app_target(spec)
    module_name, attribute = target.split(":")
    for layer in spec.layer_dirs:
        if str(layer) not in sys.path:
            sys.path.insert(0, str(layer))
    local_spec = FunctionSpec(**{**spec.__dict__, "environment": {**spec.environment, **overrides}})
    with function_environment(local_spec, region), running(spec):  # settings are read when the app is built
        app = getattr(importlib.import_module(module_name), attribute)
        app = app() if factory else app
    return serve_app(spec, InvocationPerRequest(door(app), spec), listener)


def serve_app(spec: FunctionSpec, app: Any, listener: socket.socket) -> WebFunction:
    """An ASGI app served by uvicorn on a listening socket in a thread, as the function's Function URL."""
    host, port = listener.getsockname()[:2]
    server = _QuietServer(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [listener]}, name=f"web-{spec.logical_id}", daemon=True
    )
    thread.start()
    deadline = time.monotonic() + 15
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{spec.logical_id}: the app did not start")
        time.sleep(0.02)
    return WebFunction(spec, f"http://{host}:{port}", server, thread)


def stop(web: WebFunction) -> None:
    web.server.exit_now()
    web.thread.join(timeout=5)
