"""The SDK's own client over an endpoint served in-process. Apart from endpoint_fakes, which the cold-import probe
loads: that probe shows the endpoint loads none of the SDK's client, so its harness must not load it either."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from starlette.types import ASGIApp

from tests.unit.endpoint_fakes import HOST, ServedInProcess


@asynccontextmanager
async def sdk_client(app: ASGIApp, mode: str, token: str = "key") -> AsyncIterator[Client]:
    """The SDK's own client, in protocol era `mode`, over the app served in-process, sending `token`."""
    async with ServedInProcess(app) as http:
        http.headers["authorization"] = f"Bearer {token}"
        async with Client(streamable_http_client(f"https://{HOST}/mcp", http_client=http), mode=mode) as client:
            yield client
