"""Where a request's time goes: `python -m tests.bench.profile_endpoint [ours|stock|stock_getitem] [list|call] [N]`.

Drives the ASGI app directly (no sockets, no client) with moto in-process, N requests under cProfile,
and prints the functions with the most own time and the cumulative time of the endpoint's own layers.
Not part of `make bench`: cProfile slows the code it measures; read the shares, not the times.
"""

from __future__ import annotations

import asyncio
import cProfile
import json
import os
import pstats
import sys
from typing import Any

import boto3
from moto import mock_aws

from tests.bench.endpoint import ADAPTER_HEADERS, UNKNOWN_JOB, call

# The load is far above a tier's rate: the limiter still counts every request, it never refuses one.
UNTHROTTLED = "1000000"
WARM_UP = 50


async def _request(app: Any, headers: list[tuple[bytes, bytes]], body: bytes) -> list[dict[str, Any]]:
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/mcp",
        "raw_path": b"/mcp",
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8080),
    }
    delivered, sent = False, []

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.Event().wait()  # the client never disconnects
        raise AssertionError

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return sent


async def _profile(app: Any, headers: list[tuple[bytes, bytes]], body: bytes, requests: int) -> cProfile.Profile:
    to_app: asyncio.Queue = asyncio.Queue()
    from_app: asyncio.Queue = asyncio.Queue()
    lifespan = asyncio.create_task(app({"type": "lifespan", "asgi": {"version": "3.0"}}, to_app.get, from_app.put))
    await to_app.put({"type": "lifespan.startup"})
    await from_app.get()
    first = await _request(app, headers, body)
    assert first[0]["status"] == 200, first
    for _ in range(WARM_UP):
        await _request(app, headers, body)
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(requests):
        await _request(app, headers, body)
    profile.disable()
    await to_app.put({"type": "lifespan.shutdown"})
    await from_app.get()
    await lifespan
    return profile


def main(server: str = "ours", request: str = "list", requests: str = "300") -> None:
    os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION="us-east-1")
    with mock_aws():
        from devstack.wired_stack import LocalEnvironment
        from tests.e2e.conftest import mcp_environment

        local = LocalEnvironment(boto3.client)
        environment = mcp_environment(
            local,
            SSE_KEEPALIVE_SECONDS="15",
            MCP_ALLOWED_HOSTS="127.0.0.1:*",
            LIMIT_PRO_REQUESTS_PER_MINUTE=UNTHROTTLED,
        )
        os.environ.update(environment)
        from mcp_backend.api_keys import add_api_key

        key = add_api_key(boto3.client("secretsmanager"), environment["API_KEYS_SECRET_ID"], "bench", "pro")
        headers = {"host": "127.0.0.1:8080", "accept": "application/json, text/event-stream"}
        headers["content-type"] = "application/json"
        if server == "stock":
            from tests.bench.stock_app import create_app

            body = call("echo", {"text": "bench"})
        elif server == "stock_getitem":
            from tests.bench.stock_app import create_getitem_app as create_app

            body = call("get_job", {"job_id": UNKNOWN_JOB})
        else:
            from mcp_backend.mcp.server import create_app

            headers |= {**ADAPTER_HEADERS, "authorization": f"Bearer {key}"}
            body = call("get_job", {"job_id": UNKNOWN_JOB})
        if request == "list":
            body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
        raw = [(name.encode(), value.encode()) for name, value in headers.items()]
        profile = asyncio.run(_profile(create_app(), raw, json.dumps(body).encode(), int(requests)))
    stats = pstats.Stats(profile, stream=sys.stdout)
    stats.sort_stats("tottime").print_stats(25)
    stats.sort_stats("cumtime").print_stats("mcp_backend|aws_lambda_powertools|aws_xray_sdk", 25)


if __name__ == "__main__":
    main(*sys.argv[1:])
