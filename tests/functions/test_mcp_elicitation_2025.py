"""The 2025-11-25 era's elicitation (a question on the call's open event stream, the answer a POST of its own that
any execution environment may receive) against hostile input, over raw HTTP to the in-process endpoint on the
template's stack (moto): session ids that do not open, answers without a session, for another caller, for no
question, too large or malformed, and a question nobody answers. Each gets its HTTP and JSON-RPC error or a tool
error, never a 5xx."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import anyio
import boto3
import pytest
import time_machine
from starlette.types import ASGIApp

from devstack.conformance_fixtures import create_app as create_app_with_fixtures
from mcp_backend.api_keys import Principal
from mcp_backend.config import McpSettings, load_settings
from mcp_backend.elicitation_answers import AnswerMailbox
from tests.functions.test_mcp_elicitation import LARGE, queued_messages
from tests.unit.endpoint_fakes import HOST, EveryoneIs, ServedInProcess

ERA = "2025-11-25"
HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
ALICE, BOB = "user-alice", "user-bob"
DECLARES_ELICITATION: dict[str, Any] = {"elicitation": {"form": {}}}


@pytest.fixture
def settings(local) -> McpSettings:
    return load_settings(McpSettings, dict(local.stack.function("McpServer").environment))


def app_of(settings: McpSettings, user: str = ALICE, wait: float | None = None) -> ASGIApp:
    """One execution environment of the endpoint with the conformance fixtures, its caller always `user`."""
    return create_app_with_fixtures(
        settings, EveryoneIs(Principal(user_id=user)), boto3.client, answer_wait_seconds=wait
    )


def initialize(capabilities: dict[str, Any]) -> dict[str, Any]:
    params = {"protocolVersion": ERA, "capabilities": capabilities, "clientInfo": {"name": "raw", "version": "0"}}
    return {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params}


def tool_call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": name, "arguments": arguments}}


def answer_of(question_id: str, content: dict[str, Any] | None = None) -> dict[str, Any]:
    result = {"action": "accept", "content": content or {"confirm": True}}
    return {"jsonrpc": "2.0", "id": question_id, "result": result}


def post(app: ASGIApp, body: Any, session: str | None = None, raw: bytes | None = None) -> Any:
    """One POST of the 2025 era; the response as httpx gives it (an event stream is read to its end)."""
    headers = {**HEADERS, "authorization": "Bearer key", "mcp-protocol-version": ERA}
    if session is not None:
        headers["mcp-session-id"] = session

    async def scenario() -> Any:
        async with ServedInProcess(app) as client:
            content = raw if raw is not None else json.dumps(body).encode()
            return await client.post("/mcp", content=content, headers=headers)

    return anyio.run(scenario)


def events(response: Any) -> list[dict[str, Any]]:
    """The JSON-RPC messages of an event-stream answer, in order."""
    return [json.loads(line[5:]) for line in response.text.splitlines() if line.startswith("data:")]


def session_of(settings: McpSettings, user: str = ALICE) -> str:
    response = post(app_of(settings, user), initialize(DECLARES_ELICITATION))
    assert response.status_code == 200
    return str(response.headers["mcp-session-id"])


def assert_refused(response: Any, status: int, words: str) -> None:
    assert response.status_code == status, response.text
    error = response.json()
    assert error["id"] is None and error["error"]["code"] == -32600
    assert words in error["error"]["message"]


def test_only_a_client_that_declares_elicitation_gets_a_session_id(settings):
    # Given one client that declares elicitation and one that declares nothing
    # When each initializes
    declared = post(app_of(settings), initialize(DECLARES_ELICITATION))
    silent = post(app_of(settings), initialize({}))

    # Then only the first gets a session id: a sealed token, not its capabilities in clear
    assert declared.status_code == silent.status_code == 200
    token = declared.headers["mcp-session-id"]
    assert token.startswith("v1.") and "elicitation" not in token and ALICE not in token
    assert "mcp-session-id" not in silent.headers


def test_a_session_id_that_does_not_open_for_the_caller_is_no_session(settings):
    # Given a session id tampered with, one of another caller, and one expired
    alice = session_of(settings)
    tampered = alice[:-4] + ("AAAA" if not alice.endswith("AAAA") else "BBBB")
    bobs = session_of(settings, BOB)
    large = tool_call("submit_analysis", LARGE)

    # When alice's large analysis is submitted under each
    answers = [post(app_of(settings), large, session) for session in (tampered, bobs)]
    with time_machine.travel(dt.datetime.now(dt.UTC) + dt.timedelta(hours=13)):
        answers.append(post(app_of(settings), large, alice))

    # Then each call is served as one of a client that declared nothing: a clear tool error, nothing queued
    for response in answers:
        assert response.status_code == 200
        [result] = [message["result"] for message in events(response) or [response.json()]]
        assert result["isError"] is True
        assert "did not declare elicitation" in result["content"][0]["text"]
    assert queued_messages(settings) == []


def test_an_answer_without_a_session_or_under_one_that_does_not_open_is_refused(settings):
    # Given a question waiting for alice's answer
    mailbox = AnswerMailbox(settings.rate_limit_table_name)
    mailbox.open("elicit-q1", ALICE, 60)

    # When its answer comes with no session id, and under bob's
    none = post(app_of(settings), answer_of("elicit-q1"))
    foreign = post(app_of(settings), answer_of("elicit-q1"), session_of(settings, BOB))

    # Then the first is 400 and the second 404 (an unknown session, as the spec answers it)
    assert_refused(none, 400, "Mcp-Session-Id")
    assert_refused(foreign, 404, "Session not found")
    assert mailbox.take("elicit-q1") is None


def test_an_answer_for_another_callers_question_or_for_none_is_refused_and_stored_nowhere(settings):
    # Given a question waiting for bob's answer
    mailbox = AnswerMailbox(settings.rate_limit_table_name)
    mailbox.open("elicit-bobs", BOB, 60)
    session = session_of(settings)

    # When alice answers it, and answers an id nobody asked
    theirs = post(app_of(settings), answer_of("elicit-bobs"), session)
    unknown = post(app_of(settings), answer_of("elicit-nobody-asked"), session)

    # Then both are 400, and bob's question still waits with no answer
    assert_refused(theirs, 400, "no question of yours")
    assert_refused(unknown, 400, "no question of yours")
    assert mailbox.take("elicit-bobs") is None


def test_an_expired_question_refuses_its_late_answer(settings):
    # Given alice's question, asked a minute ago with a thirty-second wait
    mailbox = AnswerMailbox(settings.rate_limit_table_name)
    with time_machine.travel(dt.datetime.now(dt.UTC) - dt.timedelta(seconds=60)):
        mailbox.open("elicit-late", ALICE, 30)

    # When her answer arrives now
    late = post(app_of(settings), answer_of("elicit-late"), session_of(settings))

    # Then it is refused, and nothing is stored for the call that stopped waiting
    assert_refused(late, 400, "no question of yours")
    assert mailbox.take("elicit-late") is None


def test_an_oversized_or_malformed_answer_is_refused(settings):
    # Given alice's question waiting
    mailbox = AnswerMailbox(settings.rate_limit_table_name)
    mailbox.open("elicit-big", ALICE, 60)
    session = session_of(settings)

    # When she answers with 70 KiB of content, and with a response that has neither result nor error
    big = post(app_of(settings), answer_of("elicit-big", {"confirm": True, "notes": "x" * 70_000}), session)
    malformed = post(app_of(settings), {"jsonrpc": "2.0", "id": "elicit-big"}, session)

    # Then the first is 413, the second 400, and neither is handed to the waiting call
    assert_refused(big, 413, "at most")
    assert_refused(malformed, 400, "JSON-RPC response")
    assert mailbox.take("elicit-big") is None


def test_a_question_nobody_answers_ends_its_call_with_a_tool_error_at_its_deadline(settings):
    # Given a session that declared elicitation, and an environment whose questions wait one second
    session = session_of(settings)

    # When the suite's elicitation tool is called and nobody answers
    response = post(app_of(settings, wait=1.0), tool_call("test_elicitation", {"message": "Who?"}), session)

    # Then the stream carried the question (an unguessable id), then a tool error naming the wait
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    question, reply = events(response)
    assert question["method"] == "elicitation/create" and question["id"].startswith("elicit-")
    assert len(question["id"]) > len("elicit-") + 30
    assert question["params"]["requestedSchema"]["required"] == ["username", "email"]
    assert reply["id"] == 2 and reply["result"]["isError"] is True
    assert "not answered: no answer within 1 seconds" in reply["result"]["content"][0]["text"]


def test_a_client_that_hangs_up_ends_the_wait_and_its_late_answer_is_refused(settings):
    # Given a session that declared elicitation, and an environment whose questions wait a minute
    session = session_of(settings)
    app = app_of(settings, wait=60.0)
    body = json.dumps(tool_call("test_elicitation", {"message": "Who?"})).encode()
    headers = {**HEADERS, "authorization": "Bearer key", "mcp-protocol-version": ERA, "mcp-session-id": session}
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "https",
        "path": "/mcp",
        "raw_path": b"/mcp",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", HOST.encode()), *((k.encode(), v.encode()) for k, v in headers.items())],
        "client": ("127.0.0.1", 50000),
        "server": (HOST, 443),
    }
    asked = anyio.Event()
    sent: list[bytes] = []

    async def receive() -> dict[str, Any]:
        if not sent:
            sent.append(b"")
            return {"type": "http.request", "body": body, "more_body": False}
        await asked.wait()  # the client hangs up once it has seen the question
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message.get("body", b""))
        if b"elicitation/create" in message.get("body", b""):
            asked.set()

    # When the suite's elicitation tool is called and the client hangs up after the question
    async def scenario() -> None:
        async with ServedInProcess(app):
            await app(scope, receive, send)

    anyio.run(scenario)

    # Then the call ended without waiting out its minute, with a tool error saying the client hung up
    stream = b"".join(sent).decode()
    [question, reply] = [json.loads(line[5:]) for line in stream.splitlines() if line.startswith("data:")]
    assert "the client hung up" in reply["result"]["content"][0]["text"]
    # And its question is closed: an answer arriving now is refused
    late = post(app_of(settings), answer_of(question["id"]), session)
    assert_refused(late, 400, "no question of yours")
