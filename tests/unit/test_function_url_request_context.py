"""The local stack's Function URLs pass the request context as Lambda and the Web Adapter do: each request's
`x-amzn-request-context` names the address the connection came from (`http.sourceIp`), whatever the client wrote
in its own headers, so the authorization server counts registrations by the same source locally as deployed."""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx
import pytest
from starlette.responses import JSONResponse

from devstack.front_doors.function_urls import InvocationPerRequest
from mcp_backend.authorization.registration import source_of


async def echo(scope: Any, receive: Any, send: Any) -> None:
    """An app answering the request context it was given and the source the registration limit keys on."""
    context = next(v for k, v in scope["headers"] if k == b"x-amzn-request-context")
    await JSONResponse({"context": json.loads(context), "source": source_of(scope)})(scope, receive, send)


def through_front_door(peer: str, headers: dict[str, str]) -> dict[str, Any]:
    async def call() -> dict[str, Any]:
        transport = httpx.ASGITransport(app=InvocationPerRequest(echo), client=(peer, 40000))
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:3000") as client:
            answer = await client.post("/register", headers=headers, content=b"{}")
            return dict(answer.json())

    return anyio.run(call)


@pytest.mark.parametrize(
    ("peer", "source"),
    [("203.0.113.7", "203.0.113.7"), ("2001:db8:1:2::99", "2001:db8:1:2::/64")],
    ids=["IPv4", "IPv6"],
)
def test_the_front_door_passes_the_peer_as_the_source_and_replaces_a_forged_context(peer, source):
    # Given a client that writes its own X-Forwarded-For and its own request context
    forged = json.dumps({"requestId": "forged", "http": {"sourceIp": "198.51.100.1"}})
    headers = {"x-forwarded-for": "10.0.0.1", "x-amzn-request-context": forged, "user-agent": "probe/1"}

    # When it reaches an app through the local Function URL
    answer = through_front_door(peer, headers)

    # Then the app sees the connection's peer as the source (an IPv6 one by its /64), as on Lambda
    http = answer["context"]["http"]
    assert http["sourceIp"] == peer and answer["source"] == source
    assert (http["method"], http["path"], http["userAgent"]) == ("POST", "/register", "probe/1")
    assert answer["context"]["requestId"] != "forged"


def test_without_a_request_context_every_request_shares_one_source():
    # Given requests that did not come through a Function URL (no request context), or with a broken one
    scopes = [{"headers": []}, {"headers": [(b"x-amzn-request-context", b"{not json")]}]
    # Then they count under one shared source, never one the client names
    assert {source_of(scope) for scope in scopes} == {"unknown"}
