"""Every door of both apps has an entry in the door table (mcp_backend.doors), found from the running apps
themselves (the SDK server's request handlers, the tools it lists, the guard's answers, the authorization server's
routes), and every door carries the controls its entry declares: a request through it is refused by each one."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import pytest
from botocore.exceptions import ClientError

from mcp_backend.api_keys import Principal
from mcp_backend.doors import (
    AUTHORIZATION_ROUTES,
    MCP_ROUTES,
    METHODS,
    TOOL_DOORS,
    DoorTable,
    markdown,
)
from mcp_backend.mcp.server import create_app
from tests.unit.endpoint_fakes import SETTINGS, EveryoneIs, ServedInProcess
from tests.unit.test_authorization_server import build, documents, environment  # noqa: F401 - fixtures
from tests.unit.test_import_graph import ROOT

HEADERS = {
    "accept": "application/json, text/event-stream",
    "content-type": "application/json",
    "authorization": "Bearer key",
    "mcp-protocol-version": "2025-11-25",
}
# The 2025 handshake's own method: the SDK's runner answers it before any handler.
HANDSHAKE = {"initialize"}
# Client notifications the SDK accepts without a handler (answered 202).
NOTIFICATIONS = {name for name in METHODS if name.startswith("notifications/")}


class Tables:
    """The endpoint's DynamoDB: the rate counter grants or refuses every lease, the call slots are free or all held."""

    def __init__(self, *, rate_spent: bool = False, slots_held: bool = False) -> None:
        self.rate_spent = rate_spent
        self.slots_held = slots_held

    def update_item(self, **request: Any) -> dict[str, Any]:
        key = request["Key"]["id"]["S"]
        if (key.startswith("requests#") and self.rate_spent) or (key.startswith("inflight#") and self.slots_held):
            item = {"requests": {"N": "100000"}}
            error = {"Error": {"Code": "ConditionalCheckFailedException", "Message": "no"}, "Item": item}
            raise ClientError(error, "UpdateItem")
        return {}

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"no {name} expected before the guard answers")


class NobodyIs(EveryoneIs):
    async def authenticate(self, bearer_token: str, resource: str) -> None:  # type: ignore[override]
        return None


ORIGIN = "https://app.example"
BROWSER_SETTINGS = SETTINGS.model_copy(update={"mcp_allowed_origins": ORIGIN})


def endpoint(tables: Tables | None = None, authenticator: Any = None) -> Any:
    return create_app(
        BROWSER_SETTINGS,
        authenticator=authenticator or EveryoneIs(Principal(user_id="alice")),
        client_factory=lambda service: tables or Tables(),
        lease_ahead=lambda lease: lease(),
    )


def sdk_server(app: Any) -> Any:
    """The SDK's low-level server behind the endpoint's layers."""
    layer = app
    while not hasattr(layer, "single_exchange"):
        layer = layer.app
    return layer.single_exchange.server


def post(app: Any, bodies: list[bytes], headers: dict[str, str] | None = None) -> list[httpx.Response]:
    async def send() -> list[httpx.Response]:
        async with ServedInProcess(app) as client:
            return [await client.post("/mcp", content=body, headers=headers or HEADERS) for body in bodies]

    return anyio.run(send)


def listed_tools(app: Any) -> set[str]:
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}).encode()
    (answer,) = post(app, [body])
    return {tool["name"] for tool in answer.json()["result"]["tools"]}


def request(method: str, params: dict[str, Any] | None = None, padding: str = "") -> bytes:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params or {}}
    if not method.startswith("notifications/"):
        message["id"] = 1
    if padding:
        message["params"]["_meta"] = {"padding": padding}
    return json.dumps(message).encode()


def tool_call(name: str) -> bytes:
    return request("tools/call", {"name": name, "arguments": {}})


# Every door through /mcp: each method, and tools/call of each tool.
MCP_DOORS = [(f"method {name}", request(name)) for name in METHODS if name != "tools/call"] + [
    (f"tool {name}", tool_call(name)) for name in sorted(TOOL_DOORS)
]
MCP_DOOR_IDS = [door for door, _ in MCP_DOORS]


@pytest.fixture
def app() -> Iterator[Any]:
    yield endpoint()


def test_every_method_the_sdk_server_serves_has_a_door(app):
    # Given the methods the running endpoint's SDK server has a handler for, and the 2025 handshake
    served = set(sdk_server(app)._request_handlers) | HANDSHAKE

    # Then each has an entry in the door table, and the table names no method the server lacks
    assert served - set(METHODS) == set(), "methods without a door entry"
    assert set(METHODS) - served - NOTIFICATIONS == set(), "door entries for methods nobody serves"


def test_every_tool_the_endpoint_lists_has_a_door(app):
    # Given the tools the running endpoint lists
    tools = listed_tools(app)

    # Then each, and no other, has an entry in the door table
    assert tools and tools == set(TOOL_DOORS)


def test_every_route_the_guard_answers_has_a_door(app):
    # Given a request of every method to the guard's paths and one beside them, from a page on an allowed origin
    # (OPTIONS: the browser's preflight)
    headers = {**HEADERS, "origin": ORIGIN, "access-control-request-method": "POST"}
    methods = ["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"]
    paths = ["/mcp", "/mcp/", "/healthz", "/.well-known/oauth-protected-resource", "/other"]

    async def send() -> dict[tuple[str, str], int]:
        async with ServedInProcess(app) as client:
            return {
                (method, path): (
                    await client.request(method, path, headers=headers, content=request("ping"))
                ).status_code
                for method in methods
                for path in paths
            }

    answers = anyio.run(send)

    # When the guard answers one with anything but 404 or 405
    answered = {(method, path.rstrip("/")) for (method, path), status in answers.items() if status not in (404, 405)}

    # Then its route is in the table (a preflight is one door, whatever its path), and the guard answers every
    # route the table names but the metadata (served only in OAuth mode)
    doors = {("OPTIONS", "*") if method == "OPTIONS" else (method, path) for method, path in answered}
    assert doors - set(MCP_ROUTES) == set()
    assert {door for door in MCP_ROUTES if "oauth-protected-resource" not in door[1]} <= doors


def test_every_route_of_the_authorization_server_has_a_door(environment, documents):  # noqa: F811
    # Given the routes of the running authorization server's app for its issuer
    _, server = build(environment, documents)
    _, app = server.build()
    routes = app.routes

    # When each route's methods are listed (Starlette serves HEAD with every GET)
    doors = {(m, route.path) for route in routes for m in route.methods if m != "HEAD"}

    # Then each, and no other, has an entry in the door table
    assert doors == set(AUTHORIZATION_ROUTES)


def test_a_method_with_no_door_entry_is_refused_before_the_sdk(monkeypatch):
    # Given an endpoint whose door table lacks ping (the SDK still serves it)
    table = DoorTable({name: c for name, c in METHODS.items() if name != "ping"}, TOOL_DOORS)
    monkeypatch.setattr("mcp_backend.mcp.guard.DoorTable", lambda methods, tools: table)
    app = endpoint()

    # When a caller pings, and calls a method nobody serves
    answers = post(app, [request("ping"), request("no/such/method")])

    # Then both are method not found, with their request's id
    assert [a.json()["error"]["code"] for a in answers] == [-32601, -32601]
    assert [a.json()["id"] for a in answers] == [1, 1]


@pytest.mark.parametrize(("door", "body"), MCP_DOORS, ids=MCP_DOOR_IDS)
def test_every_authenticated_door_refuses_a_caller_without_valid_credentials(door, body):
    # Given the endpoint, and a caller whose token is not valid
    app = endpoint(authenticator=NobodyIs(Principal(user_id="alice")))

    # When it sends a request through the door
    (answer,) = post(app, [body])

    # Then it is 401 with a challenge, before anything runs
    assert answer.status_code == 401
    assert "www-authenticate" in answer.headers


@pytest.mark.parametrize(("door", "body"), MCP_DOORS, ids=MCP_DOOR_IDS)
def test_every_door_refuses_a_body_over_the_cap(door, body):
    # Given the endpoint with its body cap
    app = endpoint()
    message = json.loads(body)
    message.setdefault("params", {})["_meta"] = {"padding": "x" * SETTINGS.mcp_max_body_bytes}

    # When a request through the door is larger than the cap
    (answer,) = post(app, [json.dumps(message).encode()])

    # Then it is 413 naming the cap
    assert answer.status_code == 413
    assert str(SETTINGS.mcp_max_body_bytes) in answer.json()["error"]["message"]


@pytest.mark.parametrize(("door", "body"), MCP_DOORS, ids=MCP_DOOR_IDS)
def test_every_rated_door_refuses_a_caller_over_its_rate(door, body):
    # Given the endpoint, and alice (free tier) whose requests of this minute are all leased
    app = endpoint(Tables(rate_spent=True))

    # When she sends a request through the door
    (answer,) = post(app, [body])

    # Then it is 429 with Retry-After, naming the limit and the tier
    assert answer.status_code == 429
    assert int(answer.headers["retry-after"]) >= 1
    assert "requests_per_minute" in answer.json()["error"]["message"]
    assert "tier free" in answer.json()["error"]["message"]


SLOTTED = [(door, body) for door, body in MCP_DOORS if DoorTable(METHODS, TOOL_DOORS).decide(body).slot]


def test_the_slotted_doors_are_the_network_tools_and_the_long_poll():
    # Given the doors the table gives a call slot
    # Then they are the tools that reach the network and tasks/result, which waits for its task
    assert sorted(door for door, _ in SLOTTED) == ["method tasks/result", "tool analyze_dataset"]


@pytest.mark.parametrize(("door", "body"), SLOTTED, ids=[door for door, _ in SLOTTED])
def test_every_slotted_door_refuses_a_caller_at_the_slot_cap(door, body):
    # Given the endpoint, and alice with every one of her call slots held
    app = endpoint(Tables(slots_held=True))

    # When she sends a request through the door
    (answer,) = post(app, [body])

    # Then it is 429 with Retry-After, naming the limit and the tier
    assert answer.status_code == 429
    assert answer.headers["retry-after"] == "5"
    assert "calls_in_flight" in answer.json()["error"]["message"]
    assert "tier free" in answer.json()["error"]["message"]


def test_the_security_doc_holds_the_generated_door_table():
    # Given docs/security.md
    doc = (ROOT / "docs" / "security.md").read_text()

    # Then its door table is the one the door table generates
    assert markdown() in doc
