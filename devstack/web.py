"""Function URLs of web-adapter functions, served on loopback by uvicorn.

On Lambda the Lambda Web Adapter runs the function's start script and forwards Function URL
requests to the ASGI server it starts. Locally the stack reads the same script for the app it
names (`uvicorn [--factory] module:attribute`), builds it inside the function's declared
environment, and serves it on 127.0.0.1. The adapter's own hop is not emulated.
"""

from __future__ import annotations

import importlib
import re
import socket
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

import uvicorn

from devstack.runtime import function_environment
from devstack.stack import FunctionSpec

_UVICORN_TARGET = re.compile(r"uvicorn\s+(?P<flags>(?:--?\S+\s+)*)(?P<target>[\w.]+:[\w]+)")


class NotAWebFunction(Exception):
    pass


@dataclass
class WebFunction:
    spec: FunctionSpec
    url: str
    server: Any
    thread: threading.Thread


def app_target(spec: FunctionSpec) -> tuple[str, bool]:
    """(module:attribute, is_factory) from the function's start script."""
    script = spec.code_dir / spec.handler
    if not spec.handler.endswith(".sh") or not script.exists():
        raise NotAWebFunction(f"{spec.logical_id}: handler {spec.handler} is not a web-adapter start script")
    match = _UVICORN_TARGET.search(script.read_text())
    if match is None:
        raise NotAWebFunction(f"{spec.logical_id}: {spec.handler} does not start uvicorn with an app target")
    return match.group("target"), "--factory" in match.group("flags")


def serve(spec: FunctionSpec, host: str, port: int, region: str, overrides: dict[str, str]) -> WebFunction:
    target, factory = app_target(spec)
    module_name, attribute = target.split(":")
    for layer in spec.layer_dirs:
        if str(layer) not in sys.path:
            sys.path.insert(0, str(layer))
    local_spec = FunctionSpec(**{**spec.__dict__, "environment": {**spec.environment, **overrides}})
    with function_environment(local_spec, region):  # settings are read when the app is built
        app = getattr(importlib.import_module(module_name), attribute)
        app = app() if factory else app
    return serve_app(spec, app, host, port)


def serve_app(spec: FunctionSpec, app: Any, host: str, port: int) -> WebFunction:
    """An ASGI app served by uvicorn on host:port in a thread, as the function's Function URL."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name=f"web-{spec.logical_id}", daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{spec.logical_id}: the app did not start")
        time.sleep(0.02)
    return WebFunction(spec, f"http://{host}:{port}", server, thread)


def stop(web: WebFunction) -> None:
    web.server.should_exit = True
    web.thread.join(timeout=5)
