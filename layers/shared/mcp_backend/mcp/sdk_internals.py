"""Every name the endpoint takes from the SDK's internal modules, behind one version check.

The SDK's public surface (`mcp.server.lowlevel.Server`, `mcp.server.context`, `mcp.server.extension`,
`mcp.server.request_state`, `mcp.shared.exceptions`, `mcp_types`) is what its documentation shows a low-level server
using. The stateless JSON fast path (mcp_backend.mcp.single_exchange) also needs what the SDK's own stateless
transport uses: its connection, its one-request runner, its dispatcher's types and error mapping, its transport's
Accept check and body limit; the resource table's URI templates use its RFC 6570 matcher. Those modules carry no
compatibility promise, so they are imported here only, and only on an SDK release this module was written and tested
against: any other stops the import with an error naming both versions (`make env` installs the pinned one; an
upgrade re-reads these modules, runs tests/unit/test_single_exchange.py and moves the range).
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

# Releases whose internals match the names below: from the first, up to but not including the second.
COMPATIBLE_SDK = ((2, 3, 0), (2, 4, 0))
SDK_DISTRIBUTIONS = ("mcp", "mcp-types")


class UnsupportedSdkVersion(ImportError):
    """The installed SDK is not a release the endpoint's use of its internals was written for."""


def release(text: str) -> tuple[int, ...]:
    """The numeric release of a version string ("2.3.0rc1" is (2, 3, 0)); a part without digits counts 0."""
    parts: list[int] = []
    for part in text.split("+")[0].split(".")[:3]:
        digits = ""
        for char in part:
            if not char.isdigit():
                break
            digits += char
        parts.append(int(digits or 0))
    return tuple(parts)


def check_sdk_version(installed: str, distribution: str = "mcp") -> None:
    low, high = COMPATIBLE_SDK
    if not low <= release(installed) < high:
        wanted = f">={'.'.join(map(str, low))},<{'.'.join(map(str, high))}"
        raise UnsupportedSdkVersion(
            f"{distribution} {installed} is installed, but mcp_backend.mcp.sdk_internals was written for "
            f"{distribution}{wanted}: install the pinned release (uv.lock) or port the endpoint to this one"
        )


def installed_sdk_version(distribution: str) -> str:
    try:
        return version(distribution)
    except PackageNotFoundError:
        raise UnsupportedSdkVersion(f"{distribution} is not installed") from None


for _distribution in SDK_DISTRIBUTIONS:
    check_sdk_version(installed_sdk_version(_distribution), _distribution)

# Imported only once the version is known to match (E402 on purpose).
from mcp.server.connection import Connection  # noqa: E402
from mcp.server.runner import serve_one  # noqa: E402
from mcp.server.streamable_http import CONTENT_TYPE_JSON, check_accept_headers  # noqa: E402
from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE  # noqa: E402
from mcp.shared.dispatcher import CallOptions  # noqa: E402
from mcp.shared.exceptions import NoBackChannelError  # noqa: E402
from mcp.shared.jsonrpc_dispatcher import handler_exception_to_error_data  # noqa: E402
from mcp.shared.message import MessageMetadata, ServerMessageMetadata  # noqa: E402
from mcp.shared.transport_context import TransportContext  # noqa: E402
from mcp.shared.uri_template import UriTemplate  # noqa: E402
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS  # noqa: E402

__all__ = [
    "COMPATIBLE_SDK",
    "CONTENT_TYPE_JSON",
    "DEFAULT_MAX_REQUEST_BODY_SIZE",
    "HANDSHAKE_PROTOCOL_VERSIONS",
    "CallOptions",
    "Connection",
    "MessageMetadata",
    "NoBackChannelError",
    "ServerMessageMetadata",
    "TransportContext",
    "UnsupportedSdkVersion",
    "UriTemplate",
    "check_accept_headers",
    "check_sdk_version",
    "handler_exception_to_error_data",
    "serve_one",
]
