"""A tools/list alike but for its id is answered with the SDK's earlier answer, with its own id; anything else
(another request, an error, an id the SDK must judge) still reaches the SDK."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

from mcp_backend.mcp import listing_answers
from mcp_backend.mcp.listing_answers import ListingAnswers
from mcp_backend.mcp.server import create_app
from tests.unit.endpoint_fakes import HOST, SETTINGS, EveryoneIsAlice, RoomyRateTable, ServedInProcess

HEADERS = [(b"accept", b"application/json, text/event-stream"), (b"content-type", b"application/json")]


class CountingSdk:
    """Stands in for the SDK's JSON transport: answers each request with a result naming the request's id and
    protocol header, or a JSON-RPC error for a `tools/list` whose params are not an object."""

    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.calls += 1
        message = json.loads((await receive())["body"])
        version = dict(scope["headers"]).get(b"mcp-protocol-version", b"").decode()
        if isinstance(message.get("params"), dict):
            answer: dict[str, Any] = {
                "jsonrpc": "2.0",
                "id": message.get("id"),
                "result": {"tools": [], "era": version},
            }
            status = 200
        else:
            answer = {"jsonrpc": "2.0", "id": message.get("id"), "error": {"code": -32602, "message": "bad params"}}
            status = 400
        body = json.dumps(answer).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def post(app: ListingAnswers, message: dict[str, Any], *extra: tuple[bytes, bytes]) -> tuple[int, dict[str, Any]]:
    """One POST through the listing cache: its status and JSON answer."""
    body = json.dumps(message).encode()
    scope = {"type": "http", "method": "POST", "path": "/mcp", "headers": [*HEADERS, *extra]}
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(event: dict[str, Any]) -> None:
        sent.append(event)

    anyio.run(app.answer, scope, receive, send, message)
    body = b"".join(event.get("body", b"") for event in sent if event["type"] == "http.response.body")
    start = sent[0]
    assert dict(start["headers"])[b"content-length"] == str(len(body)).encode()
    return start["status"], json.loads(body)


def listing(request_id: Any, params: Any = None) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/list", "params": {} if params is None else params}


@pytest.fixture
def sdk() -> CountingSdk:
    return CountingSdk()


def test_a_repeated_listing_gets_the_sdks_answer_with_its_own_id_without_the_sdk(sdk):
    # Given the SDK has answered a tools/list once
    app = ListingAnswers(sdk)
    first = post(app, listing(1))

    # When the same request comes with other ids, a number and a string
    again, named = post(app, listing(2)), post(app, listing("req-7"))

    # Then each is the SDK's result with its own id, and the SDK answered only the first
    assert first == (200, {"jsonrpc": "2.0", "id": 1, "result": {"tools": [], "era": ""}})
    assert again == (200, {"jsonrpc": "2.0", "id": 2, "result": {"tools": [], "era": ""}})
    assert named[1]["id"] == "req-7"
    assert sdk.calls == 1


def test_a_listing_in_another_protocol_era_or_with_other_params_is_the_sdks_to_answer(sdk):
    # Given a kept answer of a tools/list without a protocol header
    app = ListingAnswers(sdk)
    post(app, listing(1))

    # When the same listing comes in another era, and one with a cursor
    modern = post(app, listing(2), (b"mcp-protocol-version", b"2026-07-28"))
    paged = post(app, listing(3, {"cursor": "x"}))

    # Then the SDK answers both (the era's answer is its own)
    assert modern[1]["result"]["era"] == "2026-07-28"
    assert paged[1]["id"] == 3
    assert sdk.calls == 3


@pytest.mark.parametrize("request_id", [True, None, {"a": 1}, [1], 1.5])
def test_an_id_the_sdk_must_judge_always_reaches_it(sdk, request_id):
    # Given a kept answer of a tools/list
    app = ListingAnswers(sdk)
    post(app, listing(1))

    # When the same listing comes with an id that is not a JSON-RPC string or integer (or none)
    message = listing(request_id)
    if request_id is None:
        del message["id"]
    anyio.run(app.answer, {"type": "http", "path": "/mcp", "headers": HEADERS}, _body(message), _discard, message)

    # Then the SDK sees it
    assert sdk.calls == 2


def test_an_error_is_never_kept(sdk):
    # Given a tools/list whose params the SDK refuses
    app = ListingAnswers(sdk)

    # When it is sent twice
    answers = [post(app, listing(n, ["not", "an", "object"])) for n in (1, 2)]

    # Then the SDK answers both with its error
    assert [status for status, _ in answers] == [400, 400]
    assert sdk.calls == 2


def test_at_most_max_entries_are_kept_the_least_recently_used_dropped_first(sdk):
    # Given room for two answers, and three distinct listings answered in turn
    app = ListingAnswers(sdk, max_entries=2)
    for cursor in ("a", "b"):
        post(app, listing(1, {"cursor": cursor}))
    post(app, listing(1, {"cursor": "a"}))  # "a" used again: "b" is now the least recent
    post(app, listing(1, {"cursor": "c"}))

    # When "a" and "b" are asked again
    calls = sdk.calls
    post(app, listing(2, {"cursor": "a"}))
    post(app, listing(2, {"cursor": "b"}))

    # Then "a" was kept and "b" dropped
    assert sdk.calls == calls + 1


def _body(message: dict[str, Any]) -> Any:
    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": json.dumps(message).encode(), "more_body": False}

    return receive


async def _discard(event: dict[str, Any]) -> None:
    return None


@pytest.mark.parametrize("method", [["tools/list"], {"m": 1}, 7, None])
def test_a_method_that_is_not_a_string_reaches_the_sdk(sdk, method):
    # Given a message whose method is JSON of another type (a hostile or broken client)
    message = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {}}

    # When it is sent
    anyio.run(
        ListingAnswers(sdk).answer,
        {"type": "http", "path": "/mcp", "headers": HEADERS},
        _body(message),
        _discard,
        message,
    )

    # Then the SDK judges it (and answers it), nothing fails before it
    assert sdk.calls == 1


def test_a_large_listing_request_is_never_kept(sdk):
    # Given a tools/list the SDK accepts whose params carry 64 KB of client metadata (memory a hostile tenant
    # could pin, 64 entries at a time, were it kept)
    app = ListingAnswers(sdk)
    bulky = listing(1, {"_meta": {"note": "x" * 65536}})

    # When it is sent twice
    post(app, bulky)
    post(app, {**bulky, "id": 2})

    # Then the SDK answers both
    assert sdk.calls == 2


def test_a_listing_with_large_mcp_headers_is_never_kept(sdk):
    # Given a tools/list whose MCP headers carry 16 KB
    app = ListingAnswers(sdk)
    header = (b"mcp-param-note", b"x" * 16384)

    # When it is sent twice
    post(app, listing(1), header)
    post(app, listing(2), header)

    # Then the SDK answers both
    assert sdk.calls == 2


def test_a_repeated_listing_encodes_only_its_id(sdk, monkeypatch):
    # Given the SDK has answered a tools/list once, and every JSON encoding noted from then on
    app = ListingAnswers(sdk)
    post(app, listing(1))
    encoded: list[Any] = []
    dumps = json.dumps

    def noting(value: Any, *args: Any, **kwargs: Any) -> str:
        encoded.append(value)
        return dumps(value, *args, **kwargs)

    monkeypatch.setattr(listing_answers.json, "dumps", noting)

    # When the same listing comes again with another id
    again = post(app, listing("req-2"))

    # Then it is the kept result with its own id, and the kept result was never encoded again (the id was)
    assert again == (200, {"jsonrpc": "2.0", "id": "req-2", "result": {"tools": [], "era": ""}})
    assert "req-2" in encoded
    assert not any(isinstance(value, dict) and "result" in value for value in encoded)


# Ids a client may send: integers (large and negative too), and strings with quotes, backslashes, markup,
# non-ASCII text and control characters.
IDS = [0, 7, -3, 2**63, 10**30, "7", 'a"b', "back\\slash", "</script>", "élève ✓ 日本", "tab\tnew\nline"]


LISTING_HEADERS = {
    "accept": "application/json, text/event-stream",
    "content-type": "application/json",
    "authorization": "Bearer key",
}


def listed_by(app: Any, ids: list[Any]) -> list[dict[str, Any]]:
    """The endpoint's answers to a tools/list with each id in turn, in one app (one process)."""

    async def run() -> list[dict[str, Any]]:
        async with ServedInProcess(app) as client:
            answers = []
            for request_id in ids:
                body = json.dumps(listing(request_id)).encode()  # ASCII: a lone surrogate sent escaped
                response = await client.post(f"https://{HOST}/mcp", content=body, headers=LISTING_HEADERS)
                assert response.status_code == 200, response.content
                answers.append(json.loads(response.content))
            return answers

    return anyio.run(run)


def endpoint() -> Any:
    return create_app(SETTINGS, authenticator=EveryoneIsAlice(), client_factory=lambda service: RoomyRateTable())


def test_a_kept_listing_is_the_sdks_own_answer_for_every_kind_of_id():
    # Given an endpoint that has answered one tools/list (and kept it)
    # When the same listing comes with ids of every kind
    kept = listed_by(endpoint(), [1, *IDS])[1:]

    # Then each answer is JSON-equal to the SDK's own answer to that id (an endpoint's first listing is the SDK's)
    sdks = [listed_by(endpoint(), [request_id])[0] for request_id in IDS]
    assert kept == sdks
    assert [answer["id"] for answer in kept] == IDS


def test_a_listing_whose_id_is_a_lone_surrogate_escape_gets_the_sdks_parse_error():
    # Given an endpoint that has answered one tools/list (and kept it)
    app = endpoint()

    # When the same listing comes with an id the SDK's parser refuses (a lone surrogate escape)
    async def run() -> list[Any]:
        async with ServedInProcess(app) as client:
            answers = []
            for request_id in (1, "\ud800"):
                body = json.dumps(listing(request_id)).encode()
                response = await client.post(f"https://{HOST}/mcp", content=body, headers=LISTING_HEADERS)
                answers.append((response.status_code, json.loads(response.content)))
            return answers

    first, refused = anyio.run(run)

    # Then it is the SDK's own parse error, never the kept listing
    assert first[0] == 200
    assert refused[0] == 400 and refused[1]["error"]["code"] == -32700
