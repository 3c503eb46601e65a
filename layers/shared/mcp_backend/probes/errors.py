"""Why a probe failed, as typed exceptions: their class name becomes the OnFailure envelope's errorType
and their message its errorMessage. Messages name the endpoint by server id and never carry the URL's
query, headers or the auth token."""

from __future__ import annotations


class ProbeFailed(Exception):
    """Base: the probe could not judge the endpoint's MCP service at all."""


class ProbeTimeout(ProbeFailed):
    """The handshake and tools/list did not finish within the probe's deadline."""


class ProbeUnreachable(ProbeFailed):
    """No connection: DNS failure, refused or reset."""


class ProbeHttpStatus(ProbeFailed):
    """The endpoint answered with an HTTP error status (401, 404, 5xx...)."""

    def __init__(self, server_id: str, status_code: int) -> None:
        self.status_code = status_code
        super().__init__(f"endpoint {server_id} answered HTTP {status_code}")


class ProbeProtocolError(ProbeFailed):
    """A 2xx answer that is not MCP: no valid handshake or an unparseable message."""


class ProbeResponseTooLarge(ProbeFailed):
    """One HTTP response of the endpoint was larger than the probe reads (MAX_PROBE_RESPONSE_BYTES)."""


class ProbeRefused(ProbeFailed):
    """The URL is not one a probe may call (scheme, or a private address outside the local stack)."""


class EndpointUnregistered(ProbeFailed):
    """The event names a server id that no registered endpoint has (unregistered while its probe was due).

    Distinct from the tools' EndpointNotFound, which answers a caller that names no endpoint of its own.
    """
