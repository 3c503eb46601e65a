"""The local Web Adapter's SnapStart restore path (devstack.runtime.adapter_readiness): after init it POSTs the
app's hooks and runs the readiness check again, and a hook that answers non-2xx, or not at all, fails the restore
as Lambda fails it (SnapStartException)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from typing import Any

import pytest

from devstack.ports import free_port
from devstack.runtime.adapter_readiness import AdapterSettings
from devstack.runtime.function_errors import FunctionError

HOOKS = {
    "AWS_LWA_READINESS_CHECK_PATH": "/healthz",
    "AWS_LWA_SNAPSTART_BEFORE_CHECKPOINT_PATH": "/before",
    "AWS_LWA_SNAPSTART_AFTER_RESTORE_PATH": "/after",
}


class App:
    """A web app on loopback that records the requests it gets and answers the hooks with `hook_status`."""

    def __init__(self, hook_status: int) -> None:
        self.requests: list[tuple[str, str]] = []
        app = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                app.requests.append((self.command, self.path))
                status = 200 if self.path == "/healthz" else hook_status
                self.send_response(status)
                self.send_header("content-length", "0")
                self.end_headers()

            do_GET = do_POST = _answer

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def app_answering() -> Iterator[Any]:
    apps: list[App] = []

    def start(hook_status: int) -> App:
        apps.append(App(hook_status))
        return apps[-1]

    yield start
    for app in apps:
        app.server.shutdown()
        app.server.server_close()


def test_the_restore_path_posts_both_hooks_then_checks_readiness_again(app_answering):
    # Given an initialized environment whose app answers its hooks with 204
    app = app_answering(204)
    env: Any = SimpleNamespace(port=app.port)

    # When the adapter takes it through a snapshot and a restore
    AdapterSettings.from_environment(HOOKS).snapstart_cycle(env, limit=10)

    # Then the before-checkpoint hook, the after-restore hook and a readiness check came, in that order
    assert app.requests == [("POST", "/before"), ("POST", "/after"), ("GET", "/healthz")]


def test_a_hook_that_answers_non_2xx_fails_the_restore(app_answering):
    # Given an app whose hooks answer 500
    env: Any = SimpleNamespace(port=app_answering(500).port)

    # When the adapter runs the restore path
    # Then the restore fails as Lambda fails it
    with pytest.raises(FunctionError) as failed:
        AdapterSettings.from_environment(HOOKS).snapstart_cycle(env, limit=10)
    assert failed.value.document["errorType"] == "SnapStartException"
    assert "/before" in failed.value.document["errorMessage"]


def test_a_hook_nobody_answers_fails_the_restore():
    # Given nothing listening where the app should be
    env: Any = SimpleNamespace(port=free_port())

    # When the adapter runs the restore path
    # Then the restore fails, naming the hook
    with pytest.raises(FunctionError) as failed:
        AdapterSettings.from_environment(HOOKS).snapstart_cycle(env, limit=10)
    assert failed.value.document["errorType"] == "SnapStartException"
