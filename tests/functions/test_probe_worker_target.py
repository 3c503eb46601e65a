"""ProbeWorker sends an endpoint's token only to the URL that endpoint was registered with."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import boto3
import pytest

from mcp_backend.config import ProbeWorkerSettings, load_settings
from mcp_backend.monitor.items import Endpoint, endpoint_item
from mcp_backend.probes.errors import ProbeFailed
from mcp_backend.probes.worker import ProbeWorker


@pytest.fixture
def listener():
    """Loopback HTTP servers, each recording the Authorization header of every request it gets (answering 404)."""
    servers = []

    def start() -> tuple[str, list]:
        seen: list[str | None] = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                seen.append(self.headers.get("authorization"))
                self.rfile.read(int(self.headers.get("content-length", 0)))
                self.send_response(404)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}/mcp", seen

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def test_the_token_goes_to_the_registered_url_never_to_one_in_the_payload(local, listener):
    # Given an endpoint registered at one URL with a token, and a payload naming another URL
    registered_url, seen_registered = listener()
    other_url, seen_other = listener()
    boto3.client("dynamodb").put_item(
        TableName=local.table_name("MonitorTable"),
        Item=endpoint_item(
            Endpoint(server_id="srv-1", owner_id="user-alice", name="one", url=registered_url),
            auth_token="token-for-srv-1",
            registered_at=datetime.now(UTC),
        ),
    )
    environment = {**local.stack.function("ProbeWorker").environment, "PROBE_ALLOW_PRIVATE_HOSTS": "true"}
    worker = ProbeWorker(load_settings(ProbeWorkerSettings, environment), boto3.client("dynamodb"))

    # When the worker is invoked with the other URL
    with pytest.raises(ProbeFailed):
        worker.handle({"serverId": "srv-1", "endpoint": other_url})

    # Then only the registered URL was called, and with the token; the other one never was
    assert seen_registered and set(seen_registered) == {"Bearer token-for-srv-1"}
    assert seen_other == []
