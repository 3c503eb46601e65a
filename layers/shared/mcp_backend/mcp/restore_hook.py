"""SnapStart on McpServer: the after-restore hook the Lambda Web Adapter calls.

The adapter (v1.1.0 and later) is the process Lambda's SnapStart lifecycle reaches; the app is a separate process it
started, so after a restore the adapter POSTs to `AWS_LWA_SNAPSTART_AFTER_RESTORE_PATH` on the app, over loopback,
before it admits any traffic, and fails the restore on a non-2xx answer (aws/aws-lambda-web-adapter pull requests
790 and 837). Here that request refreshes what environments resumed from one snapshot must not share: `random`'s
state and every cached AWS client with boto3's default session (mcp_backend.snapstart.refresh_after_restore), and
the API-key table: dropped, so the first request reads it from Secrets Manager itself, past the Parameters and
Secrets extension's cache (restored with the snapshot); a key revoked since the snapshot is refused at once.

The hook sits in front of the guard: the adapter's request carries no credentials. It is served only to the
adapter's own request: from loopback, with neither the `x-amzn-request-context` header the adapter adds to every
relayed invocation nor a forwarded client address; anything else on its path is a 403, as the adapter itself
answers traffic from outside to the hook paths.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Sequence

import anyio.to_thread
from starlette.types import ASGIApp, Receive, Scope, Send

from mcp_backend.observability import logger
from mcp_backend.snapstart import refresh_after_restore

# Headers only a relayed request has: the adapter's per-invocation context, and a proxy's client address.
_RELAYED = (b"x-amzn-request-context", b"x-forwarded-for")


class AfterRestoreHook:
    def __init__(self, app: ASGIApp, path: str, refreshers: Sequence[Callable[[], None]]) -> None:
        self.app = app
        self.path = path
        self.refreshers = (refresh_after_restore, *refreshers)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != self.path:
            await self.app(scope, receive, send)
            return
        if scope["method"] != "POST" or not _from_the_adapter(scope):
            await _plain(send, 403, b"forbidden")
            return
        await anyio.to_thread.run_sync(self.refresh)
        await _plain(send, 204, b"")

    def refresh(self) -> None:
        for refresher in self.refreshers:
            refresher()
        logger.info("refreshed after a SnapStart restore")


def with_after_restore_hook(app: ASGIApp, path: str, authenticator: object) -> ASGIApp:
    """`app` behind the hook when `path` is set (AWS_LWA_SNAPSTART_AFTER_RESTORE_PATH); else `app` itself."""
    if not path:
        return app
    reload_keys = getattr(authenticator, "reload_after_restore", None)
    return AfterRestoreHook(app, path, [reload_keys] if reload_keys is not None else [])


def _from_the_adapter(scope: Scope) -> bool:
    client = scope.get("client")
    if not client:
        return False
    try:
        loopback = ipaddress.ip_address(client[0]).is_loopback
    except ValueError:
        return False
    return loopback and not any(name in _RELAYED for name, _ in scope.get("headers", []))


async def _plain(send: Send, status: int, body: bytes) -> None:
    headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
