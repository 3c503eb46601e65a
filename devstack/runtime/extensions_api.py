"""The Lambda Extensions API (2020-01-01) and Telemetry API (2022-07-01) of one execution environment.

External extensions (executables in the layers' /opt/extensions) are started in the sandbox beside the
runtime and drive these APIs on AWS_LAMBDA_RUNTIME_API exactly as on Lambda:
https://docs.aws.amazon.com/lambda/latest/dg/runtimes-extensions-api.html
- POST /2020-01-01/extension/register   (Lambda-Extension-Name, {"events": [INVOKE, SHUTDOWN]}) answers a
                                        Lambda-Extension-Identifier;
- GET  /2020-01-01/extension/event/next  blocks until the next INVOKE or SHUTDOWN event;
- POST /2020-01-01/extension/init/error | exit/error.
https://docs.aws.amazon.com/lambda/latest/dg/telemetry-api.html
- PUT  /2022-07-01/telemetry subscribes the extension's HTTP listener to platform, function and extension
  events, delivered as JSON arrays in batches bounded by the subscription's buffering (maxItems 1000-10000,
  maxBytes 262144-1048576, timeoutMs 25-30000; defaults 10000 / 262144 / 1000).
Events produced before the first subscription (the init phase) are kept and delivered to it.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import queue
import ssl
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import httpx

log = logging.getLogger("devstack.extensions")

EVENT_TYPES = {"INVOKE", "SHUTDOWN"}
TELEMETRY_TYPES = {"platform", "function", "extension"}
SCHEMA_VERSIONS = {"2022-07-01", "2022-12-13", "2025-01-29"}
# (minimum, maximum, default), telemetry-api.html "Configuring memory usage and buffering".
BUFFERING_LIMITS = {
    "maxItems": (1000, 10000, 10000),
    "maxBytes": (262144, 1048576, 262144),
    "timeoutMs": (25, 30000, 1000),
}
DELIVERY_ATTEMPTS = 4
# The sandbox resolves this name to its own loopback (its /etc/hosts); here, to this machine's.
SANDBOX_HOST = "sandbox.localdomain"


class ApiError(Exception):
    def __init__(self, status: int, error_type: str, message: str) -> None:
        super().__init__(message)
        self.status, self.error_type, self.message = status, error_type, message


@dataclass
class Extension:
    name: str
    events: list[str]
    id: str = field(default_factory=lambda: str(uuid.uuid4()))
    pending: queue.Queue[dict[str, Any] | None] = field(default_factory=queue.Queue)
    waiting: threading.Event = field(default_factory=threading.Event)  # blocked in event/next
    subscription: TelemetrySubscription | None = None


class TelemetrySubscription:
    """One extension's telemetry destination: a buffer flushed by its own thread."""

    def __init__(self, extension: str, types: set[str], uri: str, max_items: int, max_bytes: int, timeout_ms: int):
        self.extension = extension
        self.types = types
        self.uri = uri.replace(f"//{SANDBOX_HOST}", "//127.0.0.1")
        self.max_items, self.max_bytes, self.timeout = max_items, max_bytes, timeout_ms / 1000
        self.delivered = 0
        self.failed_batches = 0
        self._buffer: list[dict[str, Any]] = []
        self._size = 0
        self._first_at = 0.0
        self._condition = threading.Condition()
        # Held from taking a batch to its delivery's end, by the thread and by flush alike: a flush before SHUTDOWN
        # returns only once a batch the thread took has arrived (after SHUTDOWN the listener may be gone).
        self._delivering = threading.Lock()
        self._closed = False
        # Deliveries are plain HTTP into the sandbox (subscribe refuses any other URI): a TLS context that trusts
        # nothing, not httpx's default, whose CA bundle takes some 30 ms to load, inside the subscribe call the
        # extension waits on (Lambda answers it at once), in the process serving the runtime's init as well.
        self._client = httpx.Client(timeout=2.0, verify=ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT))
        self._thread = threading.Thread(target=self._run, name=f"telemetry-{extension}", daemon=True)
        self._thread.start()

    def add(self, event: dict[str, Any]) -> None:
        category = "platform" if event["type"].startswith("platform.") else event["type"]
        if category not in self.types:
            return
        with self._condition:
            if not self._buffer:
                self._first_at = time.monotonic()
            self._buffer.append(event)
            self._size += len(json.dumps(event))
            self._condition.notify()

    def flush(self) -> None:
        """Deliver what is buffered now, after any batch on its way (before SHUTDOWN reaches the extension)."""
        with self._delivering:
            with self._condition:
                batch = self._take()
            if batch:
                self._deliver(batch)

    def close(self) -> None:
        with self._condition:
            self._closed = True
            self._condition.notify()
        self._thread.join(timeout=3)
        self._client.close()

    def _run(self) -> None:
        while True:
            with self._condition:
                while not self._closed and not self._due():
                    wait = None if not self._buffer else max(0.0, self._first_at + self.timeout - time.monotonic())
                    self._condition.wait(wait)
                if self._closed:
                    return
            with self._delivering:
                with self._condition:
                    batch = self._take()
                if batch:
                    self._deliver(batch)

    def _due(self) -> bool:
        if not self._buffer:
            return False
        full = len(self._buffer) >= self.max_items or self._size >= self.max_bytes
        return full or time.monotonic() >= self._first_at + self.timeout

    def _take(self) -> list[dict[str, Any]]:
        batch, self._buffer, self._size = self._buffer, [], 0
        return batch

    def _deliver(self, batch: list[dict[str, Any]]) -> None:
        """POST one batch; like Lambda, retry with back-off while the listener is absent or failing."""
        for attempt in range(DELIVERY_ATTEMPTS):
            try:
                self._client.post(self.uri, json=batch).raise_for_status()
                self.delivered += len(batch)
                return
            except httpx.HTTPError as error:
                if attempt == DELIVERY_ATTEMPTS - 1:
                    self.failed_batches += 1
                    log.warning("telemetry for %s dropped (%d events): %s", self.extension, len(batch), error)
                    return
                time.sleep(0.1 * 2**attempt)


class ExtensionsApi:
    """Registrations, lifecycle events and telemetry of one execution environment."""

    def __init__(self, function_name: str, function_version: str, handler: str) -> None:
        self.function = {"functionName": function_name, "functionVersion": function_version, "handler": handler}
        self.extensions: dict[str, Extension] = {}
        self.init_error: dict[str, Any] | None = None
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._backlog: list[dict[str, Any]] = []  # platform events before any subscription
        self.subscribed = False

    # ------------------------------------------------------------------ the HTTP surface
    def register(self, name: str | None, body: bytes) -> tuple[str, dict[str, Any]]:
        if not name:
            raise ApiError(400, "InvalidRequest", "Lambda-Extension-Name header is required")
        try:
            events = json.loads(body or b"{}").get("events", [])
        except (ValueError, AttributeError):
            raise ApiError(400, "InvalidRequest", "body must be a JSON object with events") from None
        if not isinstance(events, list) or set(events) - EVENT_TYPES:
            raise ApiError(400, "InvalidEventType", f"events must be a subset of {sorted(EVENT_TYPES)}")
        extension = Extension(name=name, events=events)
        with self._changed:
            self.extensions[extension.id] = extension
            self._changed.notify_all()
        self.emit("platform.extension", {"name": name, "state": "Ready", "events": events})
        return extension.id, self.function

    def next_event(self, extension_id: str | None) -> dict[str, Any] | None:
        extension = self._extension(extension_id)
        with self._changed:
            extension.waiting.set()
            self._changed.notify_all()
        event = extension.pending.get()
        extension.waiting.clear()
        return event

    def fail(self, extension_id: str | None, body: bytes, error_type: str | None) -> None:
        extension = self._extension(extension_id)
        try:
            document = json.loads(body or b"{}")
        except ValueError:
            document = {}
        self.init_error = {
            "errorType": error_type or "Extension.Unknown",
            "errorMessage": f"extension {extension.name} failed: {document.get('errorMessage', '')}",
        }
        with self._changed:
            self._changed.notify_all()

    def subscribe(self, extension_id: str | None, body: bytes) -> None:
        extension = self._extension(extension_id)
        try:
            request = json.loads(body or b"{}")
            types = set(request["types"])
            destination = request["destination"]
            buffering = request.get("buffering", {})
        except (ValueError, KeyError, TypeError):
            raise ApiError(400, "ValidationError", "types and destination are required") from None
        if request.get("schemaVersion") not in SCHEMA_VERSIONS:
            raise ApiError(400, "ValidationError", f"schemaVersion must be one of {sorted(SCHEMA_VERSIONS)}")
        if not types or types - TELEMETRY_TYPES:
            raise ApiError(400, "ValidationError", f"types must be a subset of {sorted(TELEMETRY_TYPES)}")
        if destination.get("protocol") != "HTTP" or not str(destination.get("URI", "")).startswith("http://"):
            raise ApiError(400, "ValidationError", "destination must be HTTP with an http:// URI")
        limits = {}
        for name, (low, high, default) in BUFFERING_LIMITS.items():
            value = buffering.get(name, default)
            if not isinstance(value, int) or not low <= value <= high:
                raise ApiError(400, "ValidationError", f"buffering.{name} must be an integer in [{low}, {high}]")
            limits[name] = value
        subscription = TelemetrySubscription(
            extension.name, types, destination["URI"], limits["maxItems"], limits["maxBytes"], limits["timeoutMs"]
        )
        with self._lock:
            if extension.subscription is not None:
                extension.subscription.close()
            extension.subscription = subscription
            backlog, self._backlog = self._backlog, []
            self.subscribed = True
        for event in backlog:
            subscription.add(event)
        self.emit(
            "platform.telemetrySubscription", {"name": extension.name, "state": "Subscribed", "types": sorted(types)}
        )

    # ------------------------------------------------------------------ used by the environment
    def emit(self, event_type: str, record: Any) -> None:
        event = {"time": _now(), "type": event_type, "record": record}
        with self._lock:
            subscriptions = [e.subscription for e in self.extensions.values() if e.subscription is not None]
            if not subscriptions and event_type.startswith("platform."):
                self._backlog.append(event)
        for subscription in subscriptions:
            subscription.add(event)

    def dispatch(self, event: dict[str, Any]) -> None:
        """Send INVOKE or SHUTDOWN to every extension registered for it."""
        with self._lock:
            extensions = [e for e in self.extensions.values() if event["eventType"] in e.events]
        for extension in extensions:
            extension.pending.put(event)

    def ready(self, expected: int) -> bool:
        """Every expected extension registered and waiting for its next event."""
        with self._lock:
            return len(self.extensions) >= expected and all(e.waiting.is_set() for e in self.extensions.values())

    def wait_ready(self, expected: int, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        with self._changed:
            while not (len(self.extensions) >= expected and all(e.waiting.is_set() for e in self.extensions.values())):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._changed.wait(min(remaining, 0.05))
        return True

    def flush(self) -> None:
        for extension in list(self.extensions.values()):
            if extension.subscription is not None:
                extension.subscription.flush()

    def close(self) -> None:
        for extension in list(self.extensions.values()):
            extension.pending.put(None)
            if extension.subscription is not None:
                extension.subscription.close()

    def _extension(self, extension_id: str | None) -> Extension:
        with self._lock:
            extension = self.extensions.get(extension_id or "")
        if extension is None:
            raise ApiError(403, "Extension.Unknown", "Lambda-Extension-Identifier is not a registered extension")
        return extension


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
