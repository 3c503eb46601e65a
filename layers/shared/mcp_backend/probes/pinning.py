"""The probe's pinned transport (mcp_backend.pinned_transport), raising the probes' own errors, whose class names
the OnFailure envelope carries (loaded with the MCP client, not at a cold start)."""

from __future__ import annotations

from mcp_backend.pinned_transport import PinnedTransport as _Pinned
from mcp_backend.probes.errors import ProbeProtocolError, ProbeResponseTooLarge


class PinnedTransport(_Pinned):
    unreadable = ProbeProtocolError
    too_large = ProbeResponseTooLarge
