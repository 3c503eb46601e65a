"""The one place AWS clients are built. boto3 comes with the Lambda runtime (it is not in the layer) and
is imported on first use; region, credentials and endpoint (AWS_ENDPOINT_URL on the local stack) come
from the environment, as boto3 reads them when the client is created.

Owners of a table, queue or topic take a client (tests inject moto's or a double) or build a
`LazyClient`, which creates the real one when it is first used, not when the handler module loads.
"""

from __future__ import annotations

import os
import sys
import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast

from mcp_backend.lazy_imports import loaded_on_first_use
from mcp_backend.tracing.aws_calls import instrument_client
from mcp_backend.tracing.setup import configure as configure_tracing

# botocore's exception classes, for except clauses. They load with the first one such a clause evaluates (a clause
# is evaluated only when an exception reaches it, and a botocore error has loaded them already), not with the
# handler module: boto3 comes with the runtime and loads with the first client.
if TYPE_CHECKING:
    import botocore.exceptions as botocore_errors
else:
    botocore_errors = loaded_on_first_use("botocore.exceptions")

ClientFactory = Callable[[str], Any]
# A boto3 client type (mypy_boto3_<service>, imported only under TYPE_CHECKING where it is named).
ClientT = TypeVar("ClientT")
_CLIENT_CREATION = threading.Lock()


def new_client(
    service: str,
    *,
    connect_timeout: float | None = None,
    read_timeout: float | None = None,
    max_attempts: int | None = None,
) -> Any:
    import boto3  # provided by the runtime; loaded with the first client, not with the handler module
    from botocore.config import Config

    options: dict[str, Any] = {"connect_timeout": connect_timeout, "read_timeout": read_timeout}
    if max_attempts is not None:
        options["retries"] = {"max_attempts": max_attempts, "mode": "standard"}
    config = Config(**{name: value for name, value in options.items() if value is not None})
    # boto3's default session is not thread-safe while it builds a client; record threads may build some.
    with _CLIENT_CREATION:
        # The service is a runtime string; the stubs type clients per literal service name.
        client = boto3.client(service, config=config)  # type: ignore[call-overload]
    # A span per call once tracing is on (a tool's own client too); nothing is configured from here, so a process
    # that never configures tracing (the telemetry extension) gets its client untouched.
    return instrument_client(client)


class AwsClients:
    """One client per service, built on first use from `factory` (tests) or `new_client`; thread-safe."""

    def __init__(self, factory: ClientFactory | None = None) -> None:
        self._factory: ClientFactory = factory or new_client
        self._clients: dict[str, Any] = {}
        self._lock = threading.Lock()
        _CACHES.add(self)

    def forget(self) -> None:
        """Drop the clients built so far; the next use builds new ones."""
        with self._lock:
            self._clients.clear()

    def __call__(self, service: str) -> Any:
        with self._lock:
            if service not in self._clients:
                # Tracing is decided before the first client (a handler module may build one before its decorator
                # configures it); then a span per call when it is on, the client itself otherwise.
                configure_tracing()
                self._clients[service] = instrument_client(self._factory(service))
            return self._clients[service]


# Every client cache, so that forget_clients() reaches them all (weakly: an owner that is gone takes its own).
_CACHES: weakref.WeakSet[AwsClients] = weakref.WeakSet()


def forget_clients() -> None:
    """Drop every cached client, and boto3's default session with the credentials it resolved, so the next call
    builds them again: after a SnapStart restore (mcp_backend.snapstart) a client from the snapshot would carry the
    snapshot's credentials and connections. boto3 is not imported for this: if it is not loaded, nothing is cached."""
    for cache in list(_CACHES):
        cache.forget()
    boto3: Any = sys.modules.get("boto3")
    if boto3 is not None:
        with _CLIENT_CREATION:
            boto3.DEFAULT_SESSION = None


def _own_clients_in_a_forked_child() -> None:
    """A forked child (mcp_backend.jobs.apart) starts with the forking thread only: a lock another thread held
    stays held in it, and a pooled connection is the parent's too. So the child builds its own clients, under
    new locks, from a new default session; nothing is closed (the parent's connections stay the parent's)."""
    global _CLIENT_CREATION
    _CLIENT_CREATION = threading.Lock()
    for cache in list(_CACHES):
        cache._lock = threading.Lock()
        cache._clients = {}
    boto3: Any = sys.modules.get("boto3")
    if boto3 is not None:
        boto3.DEFAULT_SESSION = None


os.register_at_fork(after_in_child=_own_clients_in_a_forked_child)


class LazyClient:
    """Stands in for a boto3 client and builds it on the first attribute read (a call, `.exceptions`)."""

    def __init__(self, service: str, clients: AwsClients | None = None) -> None:
        self._service = service
        self._clients = clients or AwsClients()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._clients(self._service), name)


def client_or_lazy(client: ClientT | None, service: str) -> ClientT:
    """The injected client, or one built on first use (typed as the client it stands in for)."""
    return client if client is not None else cast(ClientT, LazyClient(service))
