"""Every part of moto the local stack uses beyond its public API (`mock_aws`, the server), in one place.

moto does not promise these: a queue's message list and its lock, the DynamoDB backend class whose item
writes are made atomic, the Cognito signing key, the EventBridge pattern matcher, and the threaded server's
WSGI parts. They are checked against the moto versions the local stack was tested with when this module is
imported, so an upgrade that moves one fails here, naming the version, instead of deep inside a test.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from importlib.metadata import version
from typing import Any

from moto.dynamodb.models import DynamoDBBackend
from moto.events.models import EventPattern
from moto.moto_server.threaded_moto_server import ThreadedMotoServer
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from moto.sqs.models import Message, Queue, sqs_backends
from moto.utilities.utils import load_resource

# The moto minor versions whose internals this module was written against (pyproject.toml pins one).
TESTED_MOTO = ("5.2.",)
MOTO_VERSION = version("moto")


class UnsupportedMotoVersion(RuntimeError):
    """moto's internals the local stack relies on may have moved."""


def check_moto_version(found: str) -> None:
    if not found.startswith(TESTED_MOTO):
        raise UnsupportedMotoVersion(
            f"moto {found} is not one the local stack was tested with ({', '.join(TESTED_MOTO)}x): "
            "check devstack/stack/moto_internals.py against it, then add it to TESTED_MOTO"
        )


check_moto_version(MOTO_VERSION)

__all__ = [
    "DomainDispatcherApplication",
    "DynamoDBBackend",
    "EventPattern",
    "Message",
    "MotoRequestHandler",
    "ThreadedMotoServer",
    "cognito_signing_key",
    "create_backend_app",
    "queue_messages",
    "sqs_queue",
]


def sqs_queue(account_id: str, region: str, name: str) -> Queue | None:
    """moto's queue object (not its API): its messages keep their receive counts and in-flight state."""
    return sqs_backends[account_id][region].queues.get(name)


@contextmanager
def queue_messages(queue: Queue) -> Iterator[list[Message]]:
    """A queue's message list under its own lock (the lock moto's ReceiveMessage waits on)."""
    lock: threading.Condition = queue._messages_lock
    with lock:
        yield queue._messages
        lock.notify_all()


def cognito_signing_key() -> dict[str, Any]:
    """The private JWK moto's Cognito signs its tokens with (the pool's JWKS publishes its public half)."""
    key: dict[str, Any] = load_resource("cognitoidp/resources/jwks-private.json")
    return key
