"""End-to-end fixtures: a real local stack (moto server + Lambda API on loopback) per test."""

from __future__ import annotations

import datetime as dt
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from devstack.server import DevStack, DevStackOptions
from devstack.template import load_template

SEMANTICS_TEMPLATE = Path(__file__).parent / "semantics" / "template.yaml"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class ManualClock:
    """The stack's notion of now, moved by the test (event age, record age, TTL, schedules)."""

    def __init__(self) -> None:
        self.now = dt.datetime.now(dt.UTC)

    def __call__(self) -> dt.datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += dt.timedelta(seconds=seconds)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def start_stack(clock) -> Iterator[Callable[..., DevStack]]:
    started: list[DevStack] = []

    def start(template: Path | None = None, **options) -> DevStack:
        stack = DevStack(
            DevStackOptions(
                aws_port=free_port(),
                lambda_port=free_port(),
                template=load_template(template) if template else None,
                run_threads=False,
                retry_delays=(0.0,),
                clock=clock,
                **options,
            )
        )
        started.append(stack.start())
        return stack

    yield start
    for stack in started:
        if not stack.stopped:
            stack.stop()


@pytest.fixture
def semantics(start_stack) -> DevStack:
    """The test-only template with one function per emulated event-source semantic."""
    return start_stack(SEMANTICS_TEMPLATE)
