"""The local Lambda runtime's Telemetry API delivery (devstack.runtime.extensions_api.TelemetrySubscription): what an
extension's listener receives, and when. The local runtime delivers an environment's remaining telemetry before its
extensions get SHUTDOWN: after SHUTDOWN an extension may exit, and its listener with it."""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Iterator
from typing import ClassVar

import pytest

from devstack.runtime.extensions_api import TelemetrySubscription
from tests.loopback_http import answer_empty, serving


class _SlowListener(http.server.BaseHTTPRequestHandler):
    """An extension's telemetry listener that takes `delay` seconds to answer each batch; records each batch once
    answered."""

    delay: ClassVar[float] = 0.0
    received: ClassVar[list[list[dict]]] = []
    arriving = threading.Event()

    def do_POST(self) -> None:
        batch = json.loads(self.rfile.read(int(self.headers["content-length"])))
        _SlowListener.arriving.set()
        time.sleep(_SlowListener.delay)
        _SlowListener.received.append(batch)
        answer_empty(self)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def listener() -> Iterator[str]:
    _SlowListener.delay, _SlowListener.received = 0.0, []
    _SlowListener.arriving.clear()
    with serving(_SlowListener) as url:
        yield url


def event(number: int) -> dict:
    # A pinned stamp is safe: the extension carries an event's time into the call log as data, never compares it.
    return {"time": "2026-12-04T05:00:00.000Z", "type": "platform.start", "record": {"requestId": f"r{number}"}}


def test_flush_returns_once_a_batch_the_buffer_sent_on_its_own_has_arrived(listener):
    # Given a subscription whose own thread is delivering a batch (its buffering timeout passed) to a slow listener
    subscription = TelemetrySubscription("probe", {"platform"}, listener, 1000, 262144, 25)
    _SlowListener.delay = 0.5
    subscription.add(event(1))
    assert _SlowListener.arriving.wait(5)

    # When the environment flushes before sending SHUTDOWN (an extension may exit once it has SHUTDOWN)
    subscription.flush()

    # Then that batch had arrived by the time flush returned
    assert _SlowListener.received == [[event(1)]]
    subscription.close()


def test_flush_delivers_what_is_still_buffered(listener):
    # Given a subscription with events buffered for longer than the test runs
    subscription = TelemetrySubscription("probe", {"platform"}, listener, 1000, 262144, 60_000)
    subscription.add(event(1))
    subscription.add(event(2))

    # When the environment flushes
    subscription.flush()

    # Then both arrived, in one batch
    assert _SlowListener.received == [[event(1), event(2)]]
    subscription.close()
