"""A client that hangs up mid-request is the client's doing: one INFO line, no traceback, its own outcome on the
request line and its own metric, never a 5xx."""

from __future__ import annotations

import json
import logging
import socket
import time
from urllib.parse import urlsplit

import pytest

pytestmark = pytest.mark.e2e

CALL = {
    "jsonrpc": "2.0",
    "id": 7,
    "method": "tools/call",
    "params": {"name": "get_job", "arguments": {"job_id": "job-that-never-arrives"}},
}


def hang_up_mid_body(url: str, key: str) -> None:
    """Announce the whole body, send a few bytes of it slowly, then close the connection."""
    target = urlsplit(url)
    body = json.dumps(CALL).encode()
    head = (
        f"POST {target.path} HTTP/1.1\r\nHost: {target.netloc}\r\nAuthorization: Bearer {key}\r\n"
        "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    with socket.create_connection((target.hostname, target.port)) as connection:
        connection.sendall(head)
        for start in range(0, 24, 8):
            connection.sendall(body[start : start + 8])
            time.sleep(0.1)


def request_lines(caplog) -> list[logging.LogRecord]:
    return [record for record in caplog.records if record.getMessage() == "mcp request"]


def test_a_client_hanging_up_mid_body_is_logged_at_info_and_counted_as_its_own_outcome(endpoint, caplog, capsys):
    caplog.set_level(logging.DEBUG)
    capsys.readouterr()

    # When a client sends part of a tools/call body, slowly, and disconnects
    hang_up_mid_body(endpoint.url, endpoint.alice_key)
    deadline = time.monotonic() + 10
    while not request_lines(caplog) and time.monotonic() < deadline:
        time.sleep(0.05)

    # Then nothing is logged as an error and no line carries a traceback
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    assert [r.getMessage() for r in caplog.records if r.exc_info or r.exc_text] == []
    # And the request line, at INFO, says the client disconnected (499: no response reached anyone)
    (line,) = request_lines(caplog)
    assert (line.levelname, line.outcome, line.status) == ("INFO", "client_disconnected", 499)
    # And the hang-up is counted as its own metric, not as a server error
    blobs = [json.loads(text) for text in capsys.readouterr().out.splitlines() if text.startswith('{"_aws"')]
    assert [blob["ClientDisconnects"] for blob in blobs if "ClientDisconnects" in blob] == [[1.0]]
