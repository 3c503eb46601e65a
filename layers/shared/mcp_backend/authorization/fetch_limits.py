"""How many client metadata documents this server fetches: per source address and per document host, each per
minute, counted in AuthorizationTable across every instance (AuthorizationStore.count, one block lease per fetch).

Only a fetch counts: a document (or a failure) the instance has cached is answered without one. The source is
the address Lambda saw, keyed as registrations key it (registration.source_of: IPv4 address, IPv6 /64); the
request's source travels in `SOURCE`, set once per request by the app, so a fetch made deep in the MCP SDK's
handlers counts for the request that caused it. Over either limit the fetch is refused (`FetchLimited`, with the
seconds until the window ends), nothing is fetched and nothing is cached.
"""

from __future__ import annotations

from contextvars import ContextVar

import anyio.to_thread

from mcp_backend.authorization.clients import FetchLimited
from mcp_backend.authorization.registration import UNKNOWN_SOURCE
from mcp_backend.authorization.store import AuthorizationStore
from mcp_backend.config import AuthorizationServerSettings
from mcp_backend.observability import logger

WINDOW_SECONDS = 60
# The request's source (registration.source_of); outside a request, all share one budget (fail closed).
SOURCE: ContextVar[str] = ContextVar("document_fetch_source", default=UNKNOWN_SOURCE)


class DocumentFetchLimits:
    """Admits one document fetch per call (see the module docstring)."""

    def __init__(self, store: AuthorizationStore, settings: AuthorizationServerSettings) -> None:
        self.store = store
        self.per_source = settings.client_document_fetches_per_minute
        self.per_host = settings.client_document_fetches_per_minute_per_host

    async def __call__(self, host: str) -> None:
        """Count a fetch from the request's source of a document on `host`; FetchLimited over either limit."""
        await anyio.to_thread.run_sync(self.admit, SOURCE.get(), host)

    def admit(self, source: str, host: str) -> None:
        if not self.store.count(f"document-source#{source}", WINDOW_SECONDS, self.per_source):
            logger.warning("client metadata document fetch refused: rate limit", extra={"limit": "source"})
            raise FetchLimited("from this address", self.store.window_left(WINDOW_SECONDS))
        if not self.store.count(f"document-host#{host}", WINDOW_SECONDS, self.per_host):
            logger.warning("client metadata document fetch refused: rate limit", extra={"limit": "host"})
            raise FetchLimited("from this client_id's host", self.store.window_left(WINDOW_SECONDS))
