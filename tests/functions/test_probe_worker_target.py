"""ProbeWorker sends an endpoint's token only to the URL that endpoint was registered with."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import boto3
import pytest

from mcp_backend.config import ProbeWorkerSettings, load_settings
from mcp_backend.monitor.items import Endpoint, endpoint_item
from mcp_backend.probes.endpoint_tokens import EndpointTokenCipher, EndpointTokenUnreadable
from mcp_backend.probes.errors import ProbeFailed
from mcp_backend.probes.worker import ProbeWorker


@pytest.fixture
def listener():
    """Loopback HTTP servers, each recording (Authorization, Host) of every request it gets (answering 404)."""
    servers = []

    def start() -> tuple[str, list]:
        seen: list[tuple[str | None, str | None]] = []
        server = recording_server("127.0.0.1", 0, seen)
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
    worker = register_and_load_worker(local, "srv-1", registered_url, "token-for-srv-1")

    # When the worker is invoked with the other URL
    with pytest.raises(ProbeFailed):
        worker.handle({"serverId": "srv-1", "endpoint": other_url})

    # Then only the registered URL was called, and with the token; the other one never was
    assert seen_registered and {auth for auth, _ in seen_registered} == {"Bearer token-for-srv-1"}
    assert seen_other == []


def test_the_probe_connects_to_the_address_it_checked_when_dns_rebinds(local, monkeypatch):
    # Given an endpoint registered by name, the real MCP endpoint on 127.0.0.1 and another listener on
    # 127.0.0.2 at the same port (standing in for an internal host), and a resolver whose answer changes
    # after the first lookup (DNS rebinding): check sees 127.0.0.1, a second lookup would see 127.0.0.2
    import socket

    checked: list[tuple[str, str]] = []
    rebound: list[tuple[str, str]] = []
    checked_server = rebound_server = None
    for _ in range(5):  # the port probed free on 127.0.0.1 may be taken on 127.0.0.2
        checked_server = recording_server("127.0.0.1", 0, checked)
        try:
            rebound_server = recording_server("127.0.0.2", checked_server.server_address[1], rebound)
            break
        except OSError:
            checked_server.server_close()
    assert checked_server is not None and rebound_server is not None
    port = checked_server.server_address[1]
    answers = iter(["127.0.0.1"])
    real_getaddrinfo = socket.getaddrinfo

    def rebinding_getaddrinfo(host, *args, **kwargs):
        if host != "mcp.rebind.test":
            return real_getaddrinfo(host, *args, **kwargs)
        address = next(answers, "127.0.0.2")
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))]

    monkeypatch.setattr(socket, "getaddrinfo", rebinding_getaddrinfo)
    url = f"http://mcp.rebind.test:{port}/mcp"
    worker = register_and_load_worker(local, "srv-2", url, "token-for-srv-2")

    # When the endpoint is probed
    try:
        with pytest.raises(ProbeFailed):
            worker.handle({"serverId": "srv-2", "endpoint": url})
    finally:
        for server in (checked_server, rebound_server):
            server.shutdown()
            server.server_close()

    # Then every request went to the checked address, under the registered name, and the second answer got nothing
    assert checked and {auth for auth, _ in checked} == {"Bearer token-for-srv-2"}
    assert {host for _, host in checked} == {f"mcp.rebind.test:{port}"}
    assert rebound == []


def recording_server(address: str, port: int, seen: list) -> ThreadingHTTPServer:
    """A loopback HTTP server recording (Authorization, Host) of each request and answering 404."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            seen.append((self.headers.get("authorization"), self.headers.get("host")))
            self.rfile.read(int(self.headers.get("content-length", 0)))
            self.send_response(404)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer((address, port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def register_and_load_worker(local, server_id: str, url: str, token: str | None) -> ProbeWorker:
    """The endpoint registered with its token (sealed as register_endpoint seals it), and a ProbeWorker with the
    local stack's loopback policy."""
    environment = {**local.stack.function("ProbeWorker").environment, "PROBE_ALLOW_LOOPBACK_HOSTS": "true"}
    cipher = EndpointTokenCipher(environment["ENDPOINT_TOKEN_KEY_ID"])
    sealed = cipher.seal(server_id, "user-alice", token) if token else None
    boto3.client("dynamodb").put_item(
        TableName=local.table_name("MonitorTable"),
        Item=endpoint_item(
            Endpoint(server_id=server_id, owner_id="user-alice", name=server_id, url=url),
            auth_ciphertext=sealed,
            registered_at=datetime.now(UTC),
        ),
    )
    return ProbeWorker(load_settings(ProbeWorkerSettings, environment), boto3.client("dynamodb"))


def test_a_token_copied_onto_another_endpoint_does_not_open_and_nothing_is_sent(local, listener):
    # Given srv-1 registered with a sealed token, and srv-2 (another owner's) whose item carries a copy of it
    url, seen = listener()
    worker = register_and_load_worker(local, "srv-1", url, "token-for-srv-1")
    table = boto3.client("dynamodb")
    key = {"sortKey": {"S": "endpoint"}}
    stolen = table.get_item(TableName=local.table_name("MonitorTable"), Key={"serverId": {"S": "srv-1"}, **key})
    copy = {**stolen["Item"], "serverId": {"S": "srv-2"}, "ownerId": {"S": "user-mallory"}}
    table.put_item(TableName=local.table_name("MonitorTable"), Item=copy)

    # When srv-2 is probed
    with pytest.raises(EndpointTokenUnreadable, match="srv-2"):
        worker.handle({"serverId": "srv-2", "endpoint": url})

    # Then its encryption context ({serverId, ownerId}) refused the ciphertext and no request was made
    assert seen == []
