"""A Function URL in front of an exec-wrapper function, with the Lambda Web Adapter's part played here.

On Lambda the adapter (an extension in its layer) waits until the web app that the function's start
script launched answers its readiness check, then turns each Function URL invocation into an HTTP
request to that app and relays the response, streamed when AWS_LWA_INVOKE_MODE=response_stream.
Here the start script really runs, in the function's sandbox (devstack.runtime.lambda_runtime), launched by
the layer's /opt/bootstrap wrapper; the readiness wait is part of the environment's init
(devstack.runtime.adapter_readiness) and this module does the relaying. Both read the adapter's
documented settings (https://github.com/awslabs/aws-lambda-web-adapter, README):
- AWS_LWA_PORT (falls back to PORT, default 8080): where the app listens. Every sandbox here shares
  the machine's loopback, so each environment is given its own port through these variables;
- AWS_LWA_READINESS_CHECK_PATH (default /), _PROTOCOL (http | tcp), _HEALTHY_STATUS (default 100-499),
  polled every 10 ms;
- AWS_LWA_INVOKE_MODE: buffered (default) or response_stream;
- AWS_LWA_SNAPSTART_BEFORE_CHECKPOINT_PATH / _AFTER_RESTORE_PATH (v1.1.0): the app's SnapStart hooks, which the
  adapter calls (devstack.runtime.adapter_readiness) and answers with 403 when a request from outside names them.
One request holds one environment, as one invocation does on Lambda. A function with reserved
concurrency answers 429 when every environment is busy (a throttle); otherwise the request waits.
"""

from __future__ import annotations

import http.cookiejar
import logging
import socket
import time
import uuid
from typing import Any

import anyio
import httpx

from devstack.front_doors.function_urls import WebFunction, serve_app, with_request_context
from devstack.runtime.adapter_readiness import AdapterSettings
from devstack.runtime.execution_environment import ExecutionEnvironment
from devstack.runtime.function_errors import FunctionError
from devstack.runtime.invocation_records import timeout_document
from devstack.runtime.lambda_runtime import FunctionPool, Throttled
from devstack.runtime.runtime_api import trace_header

log = logging.getLogger("devstack.web")

# Hop-by-hop headers (RFC 9110 7.6.1) are not relayed.
_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection"}


class FunctionUrl:
    """The ASGI app served on the Function URL's local address."""

    def __init__(self, pool: FunctionPool) -> None:
        self.pool = pool
        self.settings = AdapterSettings.from_environment(pool.function.environment)
        # A relay keeps no cookies, as the Web Adapter keeps none: one browser's Set-Cookie must never reach the
        # next caller's request (httpx's client would store it in its jar and send it with every later request).
        no_cookies = http.cookiejar.CookieJar(policy=http.cookiejar.DefaultCookiePolicy(allowed_domains=[]))
        self.client = httpx.AsyncClient(timeout=httpx.Timeout(None), follow_redirects=False, cookies=no_cookies)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await self.client.aclose()
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        await self._invoke(scope, body, send)

    async def _invoke(self, scope: dict[str, Any], body: bytes, send: Any) -> None:
        if scope["path"] in self.settings.hook_paths:
            # The SnapStart hooks are the adapter's to call: a request from outside for them is refused.
            await _reply(send, 403, b'{"Message":"Forbidden"}')
            return
        holder = self.pool.environment(wait=self.pool.function.spec.reserved_concurrency is None)
        try:
            env = await anyio.to_thread.run_sync(holder.__enter__)
        except Throttled:
            await _reply(send, 429, b'{"Message":"Rate Exceeded."}')
            return
        except FunctionError as error:
            log.error("%s: init failed: %s", self.pool.function.spec.logical_id, error)
            await _reply(send, 502, b'{"Message":"Internal Server Error"}')
            return
        failure: BaseException | None = None
        timeout = self.pool.function.spec.timeout
        request_id, init_ms = str(uuid.uuid4()), env.init_duration_ms if env.cold else None
        env.cold = False
        env.print(f"START RequestId: {request_id} Version: $LATEST")
        deadline = time.monotonic() + timeout
        started = env.begin_invocation(request_id, trace_header(), time.time() + timeout)
        status = "success"
        try:
            with anyio.fail_after(timeout):
                await self._relay(env, scope, body, send, request_id)
        except TimeoutError:
            status = "timeout"
            env.print(str(timeout_document(request_id, timeout)["errorMessage"]))
            failure = FunctionError(timeout_document(request_id, timeout))
        except BaseException as error:  # noqa: BLE001 - the client went away: the environment is ended
            status, failure = "failure", error
        finally:
            await anyio.to_thread.run_sync(env.end_invocation, request_id, started, status, deadline)
            env.close_invocation(request_id, started, status, init_ms)
            # A timed-out environment is stopped on release: the next request gets a cold start.
            await anyio.to_thread.run_sync(
                holder.__exit__,
                type(failure) if failure else None,
                failure,
                None,
            )

    async def _relay(
        self, env: ExecutionEnvironment, scope: dict[str, Any], body: bytes, send: Any, request_id: str
    ) -> None:
        query = scope.get("query_string", b"").decode()
        url = f"http://127.0.0.1:{env.port}{scope['path']}" + (f"?{query}" if query else "")
        invocation_headers = with_request_context(scope, request_id)
        headers = [(k.decode(), v.decode()) for k, v in invocation_headers if k.decode().lower() not in _HOP_BY_HOP]
        request = self.client.build_request(scope["method"], url, headers=headers, content=body)
        started = False
        try:
            response = await self.client.send(request, stream=True)
        except httpx.HTTPError:
            await _reply(send, 502, b'{"Message":"Internal Server Error"}')
            return
        try:
            relayed = [
                (k.encode(), v.encode()) for k, v in response.headers.multi_items() if k.lower() not in _HOP_BY_HOP
            ]
            if self.settings.streaming:
                await send({"type": "http.response.start", "status": response.status_code, "headers": relayed})
                started = True
                async for chunk in response.aiter_raw():
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                await send({"type": "http.response.body", "body": b""})
            else:
                content = await response.aread()
                await send({"type": "http.response.start", "status": response.status_code, "headers": relayed})
                started = True
                await send({"type": "http.response.body", "body": content})
        except httpx.HTTPError:
            if not started:
                await _reply(send, 502, b'{"Message":"Internal Server Error"}')
            # Once streaming, a broken upstream ends the stream, as a Function URL does.
        finally:
            await response.aclose()


async def _reply(send: Any, status: int, body: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


def serve_function_url(pool: FunctionPool, listener: socket.socket) -> WebFunction:
    return serve_app(pool.function.spec, FunctionUrl(pool), listener)
