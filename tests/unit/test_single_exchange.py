"""A quiet 2025-era tools/call is answered by the SDK's single-exchange kernel in the request's own task, with
exactly the answer the SDK's stateless JSON transport gives; every request it does not take still reaches that
transport."""

from __future__ import annotations

import json
import re
from typing import Any

import anyio
import pytest
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

from mcp_backend.mcp.server import create_app
from mcp_backend.mcp.single_exchange import SingleExchange
from tests.unit.endpoint_fakes import SETTINGS, EveryoneIsAlice, ServedInProcess

HEADERS = {
    "accept": "application/json, text/event-stream",
    "content-type": "application/json",
    "authorization": "Bearer k",
}
UNKNOWN_JOB = "00000000-0000-4000-8000-000000000000"


class EmptyTables:
    """Every table is empty and every conditional write succeeds: a job is never found, a rate is never passed."""

    def update_item(self, **request: Any) -> dict[str, Any]:
        return {}

    def get_item(self, **request: Any) -> dict[str, Any]:
        return {}

    def get_paginator(self, operation: str) -> EmptyTables:
        return self

    def paginate(self, **request: Any) -> list[dict[str, Any]]:
        return [{"Items": [], "Count": 0}]


def call(name: Any, arguments: Any = None, request_id: Any = 1, **params: Any) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call"}
    message["params"] = {"name": name, **({} if arguments is None else {"arguments": arguments}), **params}
    return message


ERAS = [None, "2025-03-26", "2025-06-18", "2025-11-25"]
# Each a request body and its extra headers: calls that succeed, fail in the tool, fail validation in each era,
# name no tool, and bodies and headers the SDK's transport must judge itself.
REQUESTS: list[tuple[str, Any, dict[str, str]]] = [
    ("unknown job", call("get_job", {"job_id": UNKNOWN_JOB}), {}),
    ("string id", call("get_job", {"job_id": UNKNOWN_JOB}, request_id="req-7"), {}),
    ("listing", call("list_endpoints", {}), {}),
    ("missing argument", call("get_job", {}), {}),
    ("unknown argument", call("get_job", {"job_id": UNKNOWN_JOB, "extra": 1}), {}),
    ("no arguments", call("get_job"), {}),
    ("unknown tool", call("no_such_tool", {}), {}),
    ("name not a string", call(["get_job"], {}), {}),
    ("meta", call("get_job", {"job_id": UNKNOWN_JOB}, _meta={"traceparent": "00-x"}), {}),
    (
        "modern envelope in a 2025 request",
        call("list_endpoints", {}, _meta={"io.modelcontextprotocol/protocolVersion": "2026-07-28"}),
        {},
    ),
    ("task-augmented", call("submit_analysis", {"dataset_url": "https://example.com/d.csv"}, task={"ttl": 60000}), {}),
    ("params not an object", {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": []}, {}),
    ("no params", {"jsonrpc": "2.0", "id": 1, "method": "tools/call"}, {}),
    ("id a float", call("get_job", {"job_id": UNKNOWN_JOB}, request_id=1.5), {}),
    ("id null", call("get_job", {"job_id": UNKNOWN_JOB}, request_id=None), {}),
    ("not JSON-RPC 2.0", {**call("get_job", {"job_id": UNKNOWN_JOB}), "jsonrpc": "1.0"}, {}),
    ("notification", {"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "get_job"}}, {}),
    ("method a list", {"jsonrpc": "2.0", "id": 1, "method": []}, {}),
    ("method an object", {"method": {"a": 1}}, {}),
    ("unknown era", call("get_job", {"job_id": UNKNOWN_JOB}), {"mcp-protocol-version": "2024-01-01"}),
    ("charset", call("get_job", {"job_id": UNKNOWN_JOB}), {"content-type": "application/json; charset=utf-8"}),
    ("accept any", call("get_job", {"job_id": UNKNOWN_JOB}), {"accept": "*/*"}),
]


def answers(requests: list[tuple[Any, dict[str, str]]], through_sdk: bool, monkeypatch) -> list[tuple[int, str, Any]]:
    """Each request's status, content type and JSON answer from a fresh endpoint; `through_sdk` turns the
    single exchange off, so the SDK's transport answers everything."""
    with monkeypatch.context() as patch:
        if through_sdk:
            patch.setattr(SingleExchange, "request_for", lambda self, scope, body, message: None)
        app = create_app(SETTINGS, authenticator=EveryoneIsAlice(), client_factory=lambda service: EmptyTables())

        async def scenario() -> list[tuple[int, str, Any]]:
            replies = []
            async with ServedInProcess(app) as client:
                for body, headers in requests:
                    response = await client.post("/mcp", content=json.dumps(body), headers={**HEADERS, **headers})
                    replies.append(
                        (response.status_code, response.headers.get("content-type"), _parsed(response.content))
                    )
            return replies

        return anyio.run(scenario)


def _parsed(content: bytes) -> Any:
    if not content:
        return None
    # A pydantic validation message names the pydantic version's documentation URL and the input; both sides
    # are the same, and the comparison is of the answer, not of pydantic's wording.
    return json.loads(re.sub(rb"https://errors\.pydantic\.dev/[^ \"]*", b"<doc>", content))


@pytest.mark.parametrize("era", ERAS)
def test_each_tools_call_gets_the_answer_the_sdks_transport_gives(era, monkeypatch):
    # Given the same requests, in one protocol era (or none named)
    era_header = {} if era is None else {"mcp-protocol-version": era}
    requests = [(body, {**era_header, **headers}) for _, body, headers in REQUESTS]

    # When each is sent to an endpoint that answers quiet calls itself, and to one where the SDK's transport does
    ours = answers(requests, through_sdk=False, monkeypatch=monkeypatch)
    sdk = answers(requests, through_sdk=True, monkeypatch=monkeypatch)

    # Then every answer is the same (status, content type and body), and none is a server error
    assert all(status < 500 for status, _, _ in ours), ours
    for (name, _, _), mine, theirs in zip(REQUESTS, ours, sdk, strict=True):
        assert mine == theirs, name


def test_a_quiet_tools_call_never_enters_the_sdks_stateless_transport(monkeypatch):
    # Given the SDK's stateless transport counted each time it serves a request
    served: list[str] = []
    original = StreamableHTTPSessionManager._handle_stateless_request

    async def counted(self, hint, scope, receive, send):
        served.append(json.loads(dict(scope["headers"]).get(b"x-request-name", b'""')))
        await original(self, hint, scope, receive, send)

    monkeypatch.setattr(StreamableHTTPSessionManager, "_handle_stateless_request", counted)

    # When a quiet call, a call with a body the transport must judge, and a listing are sent
    requests = [
        (call("get_job", {"job_id": UNKNOWN_JOB}), {"x-request-name": '"call"'}),
        ({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": []}, {"x-request-name": '"bad params"'}),
        ({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, {"x-request-name": '"listing"'}),
    ]
    [(status, _, reply), *_] = answers(requests, through_sdk=False, monkeypatch=monkeypatch)

    # Then the call was answered without the transport; the other two went through it
    assert status == 200 and reply["result"]["isError"] is True
    assert served == ["bad params", "listing"]
