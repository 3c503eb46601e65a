"""Headless Chromium driven through the DevTools protocol over `--remote-debugging-pipe` (commands on fd 3,
answers on fd 4, each a JSON message ended by a NUL byte): no WebSocket client, no browser download, only the
system's chromium (Debian's package; `make browser` installs it in CI)."""

from __future__ import annotations

import base64
import contextlib
import fcntl
import http.server
import json
import os
import select
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_browser() -> str | None:
    return next((path for path in map(shutil.which, BROWSERS) if path), None)


class Browser:
    def __init__(self, executable: str) -> None:
        self._profile = tempfile.TemporaryDirectory(prefix="cdp-profile-")
        # The browser reads commands from its fd 3 and writes answers to its fd 4.
        command_read, self._commands = os.pipe()
        self._answers, answer_write = os.pipe()
        arguments = [
            executable,
            "--headless",
            "--remote-debugging-pipe",
            f"--user-data-dir={self._profile.name}",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-gpu",
            "--disable-extensions",
            "--disable-background-networking",
            "--disable-dev-shm-usage",
            "about:blank",
        ]
        if os.geteuid() == 0:
            arguments.insert(1, "--no-sandbox")  # Chromium refuses to run as root with its sandbox

        def child_fds() -> None:
            # Copies above 9 first, so placing one pipe end on 3 or 4 cannot overwrite the other; the child then
            # closes every descriptor but 3 and 4 (pass_fds).
            commands = fcntl.fcntl(command_read, fcntl.F_DUPFD, 10)
            answers = fcntl.fcntl(answer_write, fcntl.F_DUPFD, 10)
            os.dup2(commands, 3)
            os.dup2(answers, 4)

        self.process = subprocess.Popen(
            arguments,
            pass_fds=(3, 4),
            preexec_fn=child_fds,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(command_read)
        os.close(answer_write)
        self._next_id = 0
        self._buffer = b""
        self._lock = threading.Lock()

    def send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> dict[str, Any]:
        """One command; its result (events that arrive meanwhile are dropped)."""
        with self._lock:
            self._next_id += 1
            message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
            if session is not None:
                message["sessionId"] = session
            os.write(self._commands, json.dumps(message).encode() + b"\0")
            while True:
                answer = self._read()
                if answer.get("id") == self._next_id:
                    if "error" in answer:
                        raise RuntimeError(f"{method}: {answer['error']}")
                    return answer["result"]

    def wait_for(self, event: str, session: str) -> dict[str, Any]:
        while True:
            message = self._read()
            if message.get("method") == event and message.get("sessionId") == session:
                return message["params"]

    def open(self, url: str, *, isolated: bool = False, phone: tuple[int, int] | None = None) -> str:
        """A new page at `url`, loaded; its session id. `isolated`: in a new browser context (its own cookies, as
        another browser would have); `phone`: a mobile viewport of that many CSS pixels (width, height)."""
        context = self.send("Target.createBrowserContext")["browserContextId"] if isolated else None
        create = {"url": "about:blank", **({"browserContextId": context} if context else {})}
        target = self.send("Target.createTarget", create)["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        self.send("Page.enable", session=session)
        if phone is not None:
            metrics = {"width": phone[0], "height": phone[1], "deviceScaleFactor": 3, "mobile": True}
            self.send("Emulation.setDeviceMetricsOverride", metrics, session=session)
        self.send("Page.navigate", {"url": url}, session=session)
        self.wait_for("Page.loadEventFired", session)
        return session

    def screenshot(self, session: str) -> bytes:
        """The page's viewport as a PNG."""
        return base64.b64decode(self.send("Page.captureScreenshot", {"format": "png"}, session=session)["data"])

    def evaluate(self, session: str, expression: str) -> Any:
        """The value of `expression` in the page (a promise is awaited)."""
        result = self.send(
            "Runtime.evaluate",
            {"expression": expression, "awaitPromise": True, "returnByValue": True},
            session=session,
        )
        if "exceptionDetails" in result:
            raise RuntimeError(result["exceptionDetails"].get("text", "evaluation failed"))
        return result["result"].get("value")

    def close(self) -> None:
        try:
            self.send("Browser.close")
        except (OSError, RuntimeError):
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        os.close(self._commands)
        os.close(self._answers)
        self._profile.cleanup()

    def _read(self, timeout_seconds: float = 60.0) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            ready, _, _ = select.select([self._answers], [], [], timeout_seconds)
            if not ready:
                raise TimeoutError(f"the browser said nothing for {timeout_seconds} s")
            chunk = os.read(self._answers, 65536)
            if not chunk:
                raise RuntimeError("the browser closed its DevTools pipe")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)


@contextlib.contextmanager
def started_browser() -> Iterator[Browser]:
    """A running headless Chromium; the test is skipped without one (failed in CI, where `make browser` installs
    it)."""
    executable = find_browser()
    if executable is None:
        if os.environ.get("CI"):
            pytest.fail("no chromium on PATH: `make browser` installs Debian's package in CI")
        pytest.skip("no chromium on PATH (apt-get install chromium, or `CI=true make browser` as root)")
    running = Browser(executable)
    try:
        yield running
    finally:
        running.close()


class LoopbackServer:
    """An HTTP server on a loopback port answering every GET with `answer(path)` (body, content type), and
    recording the paths it was asked for."""

    def __init__(self, answer: Callable[[str], tuple[bytes, str]]) -> None:
        self.paths: list[str] = []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                server.paths.append(self.path)
                body, content_type = answer(self.path)
                self.send_response(200)
                self.send_header("content-type", content_type)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.origin = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
