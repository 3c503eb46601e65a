"""The SnapStart restore hook: after Lambda resumes an environment from the shared snapshot, `random` draws its
own sequence and every cached AWS client (and boto3's default session) is built again; the hook is registered
once, by the handler decorator, and only where the runtime's hook library exists."""

from __future__ import annotations

import random
import sys
from typing import Any

import boto3
import pytest

from mcp_backend import snapstart
from mcp_backend.aws import AwsClients, LazyClient
from mcp_backend.observability import instrumented_handler


@pytest.fixture
def unregistered(monkeypatch):
    """A process where no hook has been registered yet."""
    monkeypatch.setattr(snapstart, "_registered", False)


class Counting:
    """A client factory that numbers the clients it builds."""

    def __init__(self) -> None:
        self.built = 0

    def __call__(self, service: str) -> Any:
        self.built += 1
        return {"service": service, "n": self.built}


def test_after_a_restore_two_environments_from_one_snapshot_draw_different_random_numbers():
    # Given the random state one snapshot holds, resumed in two environments
    random.seed(42)
    snapshot = random.getstate()
    drawn = []
    for _ in range(2):
        random.setstate(snapshot)
        # When each runs the restore hook before drawing its retry jitter
        snapstart.refresh_after_restore()
        drawn.append([random.random() for _ in range(4)])

    # Then they draw different sequences (without the hook both would draw the snapshot's)
    assert drawn[0] != drawn[1]


def test_after_a_restore_cached_clients_and_the_default_session_are_built_again():
    # Given an owner's lazily built client, used during init (so in the snapshot), and boto3's default session
    factory = Counting()
    clients = AwsClients(factory)
    lazy = LazyClient("kinesis", clients)
    before = clients("kinesis")
    assert lazy.get("n") == before["n"] == 1
    boto3.setup_default_session(region_name="us-east-1")
    assert boto3.DEFAULT_SESSION is not None

    # When the environment is restored
    snapstart.refresh_after_restore()

    # Then the next use builds a new client, and boto3 a new default session (credentials resolved again)
    assert lazy.get("n") == 2 and clients("kinesis") is not before
    assert boto3.DEFAULT_SESSION is None


def test_the_hook_is_registered_once_by_the_handler_decorator(unregistered):
    # Given a stand-in for the runtime's hook library
    registered: list = []

    # When two handlers are decorated in one process
    snapstart.register_hooks(registered.append)
    instrumented_handler()(lambda event, context: None)
    instrumented_handler()(lambda event, context: None)

    # Then exactly one hook is registered, the one that refreshes what a restore must not share
    assert registered == [snapstart.refresh_after_restore]


def test_without_the_runtimes_hook_library_nothing_is_registered_and_handlers_still_work(unregistered, monkeypatch):
    # Given a process without snapshot_restore_py (anywhere but Lambda's Python runtime)
    monkeypatch.setitem(sys.modules, "snapshot_restore_py", None)

    # When a handler is decorated
    handler = instrumented_handler()(lambda event, context: "done")

    # Then the decorator still gives a handler, and registering reports there is nothing to register with
    assert callable(handler)
    assert snapstart.register_hooks() is False and snapstart._registered is False


def test_with_the_runtimes_hook_library_the_decorator_registers_with_it(unregistered, monkeypatch):
    # Given the runtime's hook library (as Lambda's Python runtime provides it)
    registered: list = []
    library = type(sys)("snapshot_restore_py")
    library.register_after_restore = registered.append
    monkeypatch.setitem(sys.modules, "snapshot_restore_py", library)

    # When a handler is decorated during init
    instrumented_handler()(lambda event, context: None)

    # Then the restore hook is registered with it
    assert registered == [snapstart.refresh_after_restore]
