"""One probe: the SDK's MCP client runs the endpoint's handshake (mode "auto": server/discover, falling
back to initialize) and tools/list, within a deadline derived from the function's timeout.

Outcomes (docs/probes.md "What a probe returns"):
- healthy:  handshake and tools/list answered within the degraded-latency threshold;
- degraded: the same, but slower than the threshold;
- error:    the endpoint speaks MCP (the handshake succeeded) but tools/list answered a JSON-RPC error;
- raises:   no MCP answer at all - ProbeTimeout, ProbeUnreachable, ProbeHttpStatus, ProbeProtocolError -
            so the OnFailure envelope carries errorType and errorMessage.

Every request goes to the addresses the worker checked (PinnedTransport), never to a second DNS answer: a
name that rebinds between check and connect cannot steer the probe, and its token, at another host. TLS
still verifies the certificate for the registered name, which is also the SNI and the Host header.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from mcp_backend.monitor.items import ProbeStatus
from mcp_backend.netsafety import IPAddress
from mcp_backend.probes.errors import (
    ProbeHttpStatus,
    ProbeProtocolError,
    ProbeResponseTooLarge,
    ProbeTimeout,
    ProbeUnreachable,
)
from mcp_backend.probes.schema import schema_hash

MAX_TOOL_PAGES = 20
ERROR_MESSAGE_CHARS = 200
# Per HTTP response, counted in decoded bytes; a tools/list page is far less.
MAX_PROBE_RESPONSE_BYTES = 4 * 1024 * 1024
# The HTTP client logs every request URL at INFO; the probe logs its own outcome without URLs.
logging.getLogger("httpx2").setLevel(logging.WARNING)


@dataclass(frozen=True)
class ProbeRequest:
    server_id: str
    url: str
    auth_token: str | None
    timeout_seconds: float
    degraded_latency_ms: int
    # The addresses the URL's host resolved to when it was checked: the only ones the probe connects to.
    addresses: tuple[IPAddress, ...]
    mode: str = "auto"


async def probe(request: ProbeRequest) -> dict[str, Any]:
    import anyio
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared.exceptions import MCPError

    from mcp_backend.probes.pinning import PinnedTransport

    http_errors: list[int] = []

    async def note_status(response: Any) -> None:
        if response.status_code >= 400:
            http_errors.append(response.status_code)

    # identity: nothing to inflate. An endpoint that compresses anyway is decoded under the same cap (pinning.py).
    headers = {"accept-encoding": "identity"}
    if request.auth_token:
        headers["authorization"] = f"Bearer {request.auth_token}"
    probed_at = datetime.now(UTC)
    started = time.monotonic()
    tools: list[dict[str, Any]] = []
    rpc_error: MCPError | None = None
    protocol_version = None
    try:
        with anyio.fail_after(request.timeout_seconds):
            timeout = httpx2.Timeout(request.timeout_seconds)
            # What create_mcp_http_client builds, with the pinned transport and no proxy from the environment
            # (a proxy would connect wherever its own DNS says).
            transport = PinnedTransport(
                request.url,
                request.addresses,
                max_response_bytes=MAX_PROBE_RESPONSE_BYTES,
                deadline_seconds=request.timeout_seconds,  # every request of the probe, in total
            )
            async with httpx2.AsyncClient(
                headers=headers, timeout=timeout, transport=transport, trust_env=False
            ) as http:
                http.event_hooks["response"].append(note_status)
                async with Client(streamable_http_client(request.url, http_client=http), mode=request.mode) as client:
                    protocol_version = client.protocol_version
                    cursor = None
                    for _ in range(MAX_TOOL_PAGES):
                        try:
                            page = await client.list_tools(cursor=cursor, cache_mode="bypass")
                        except MCPError as error:
                            rpc_error = error
                            break
                        tools.extend(tool.model_dump(by_alias=True, exclude_none=True) for tool in page.tools)
                        cursor = page.next_cursor
                        if not cursor:
                            break
    except BaseException as error:  # noqa: BLE001 - classified into a typed probe failure below
        raise _classify(request.server_id, error, http_errors) from None
    latency_ms = round((time.monotonic() - started) * 1000)
    result: dict[str, Any] = {
        "serverId": request.server_id,
        "endpoint": request.url,
        "latencyMs": latency_ms,
        "probedAt": probed_at.isoformat(),
        "protocolVersion": protocol_version,
    }
    if rpc_error is not None:
        return result | {
            "status": ProbeStatus.ERROR.value,
            "toolCount": None,
            "schemaHash": None,
            "error": {"code": rpc_error.error.code, "message": rpc_error.error.message[:ERROR_MESSAGE_CHARS]},
        }
    slow = latency_ms > request.degraded_latency_ms
    return result | {
        "status": (ProbeStatus.DEGRADED if slow else ProbeStatus.HEALTHY).value,
        "toolCount": len(tools),
        "schemaHash": schema_hash(tools),
    }


def _leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in _leaves(inner)]
    return [error]


def _classify(server_id: str, error: BaseException, http_errors: list[int]) -> Exception:
    import httpx2

    leaves = _leaves(error)
    too_large = [leaf for leaf in leaves if isinstance(leaf, ProbeResponseTooLarge)]
    if too_large:
        return ProbeResponseTooLarge(f"endpoint {server_id}: an answer exceeded {MAX_PROBE_RESPONSE_BYTES} bytes")
    refused = [leaf for leaf in leaves if isinstance(leaf, ProbeProtocolError)]
    if refused:  # the transport's own refusal (a content coding), which names no host
        return ProbeProtocolError(f"endpoint {server_id}: {refused[0]}")
    if any(isinstance(leaf, TimeoutError | httpx2.TimeoutException) for leaf in leaves):
        return ProbeTimeout(f"endpoint {server_id} did not finish the MCP handshake and tools/list in time")
    if http_errors:
        return ProbeHttpStatus(server_id, http_errors[-1])
    if any(isinstance(leaf, httpx2.NetworkError) for leaf in leaves):
        kind = next(type(leaf).__name__ for leaf in leaves if isinstance(leaf, httpx2.NetworkError))
        return ProbeUnreachable(f"endpoint {server_id} is unreachable ({kind})")
    if any(isinstance(leaf, KeyboardInterrupt | SystemExit) for leaf in leaves):
        raise error
    kinds = sorted({type(leaf).__name__ for leaf in leaves})
    return ProbeProtocolError(f"endpoint {server_id} did not complete an MCP handshake ({', '.join(kinds)})")
