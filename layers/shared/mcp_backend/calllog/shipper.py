"""Ships call-log records on their own thread, so no invocation or request waits for Kinesis: the telemetry
extension's platform reports and the MCP endpoint's tool calls. Records are batched (a PutRecords per flush
interval or batch), a slow or failing stream costs records (counted, logged), never a request; the owner's
shutdown (the extension's SHUTDOWN, the endpoint's SIGTERM) flushes within its budget."""

from __future__ import annotations

import sys
import threading
import time

from mcp_backend.calllog.models import CallLogRecord
from mcp_backend.calllog.writer import CallLogWriter

# Records held while Kinesis is slow: beyond this the oldest are dropped (and counted).
MAX_PENDING = 5000


class RecordShipper:
    def __init__(
        self, writer: CallLogWriter, interval_seconds: float = 1.0, batch: int = 200, name: str = "call-log-telemetry"
    ) -> None:
        self.writer = writer
        self.name = name
        self.interval = interval_seconds
        self.batch = batch
        self.written = 0
        self.dropped = 0
        self._pending: list[CallLogRecord] = []
        self._in_flight = 0  # records in the PutRecords under way
        self._condition = threading.Condition()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="call-log-shipper", daemon=True)
        self._thread.start()

    def add(self, records: list[CallLogRecord]) -> None:
        with self._condition:
            self._pending.extend(records)
            overflow = len(self._pending) - MAX_PENDING
            if overflow > 0:
                del self._pending[:overflow]
                self.dropped += overflow
            if len(self._pending) >= self.batch:
                self._condition.notify()

    def close(self, budget_seconds: float) -> None:
        """Flush what is pending within the budget (SHUTDOWN gives an external extension 2 s)."""
        deadline = time.monotonic() + budget_seconds
        with self._condition:
            self._stopping = True
            self._condition.notify()
        self._thread.join(timeout=max(0.0, deadline - time.monotonic()))
        with self._condition:
            self.dropped += len(self._pending) + (self._in_flight if self._thread.is_alive() else 0)
            self._pending.clear()
        print(f"{self.name}: {self.written} records written, {self.dropped} dropped", file=sys.stderr, flush=True)

    def _run(self) -> None:
        while True:
            with self._condition:
                if not self._stopping and len(self._pending) < self.batch:
                    self._condition.wait(self.interval)
                records, self._pending = self._pending, []
                stopping = self._stopping
                self._in_flight = len(records)
            if records:
                outcome = self.writer.put(records)
                with self._condition:
                    self._in_flight = 0
                    self.written += outcome.written
                    self.dropped += outcome.dropped
            if stopping:
                return
