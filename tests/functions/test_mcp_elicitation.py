"""A tool that asks its user mid-call (MCP 2026-07-28 `input_required`, SEP-2322), over raw JSON-RPC against
the in-process endpoint on the template's stack (moto): a large submit_analysis is confirmed first; the retry may
land on another execution environment (a second app built from the same settings and RequestStateSecret); a
tampered, expired or foreign state and an answer that does not fit the form are -32602, never a 5xx."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import anyio
import boto3
import pytest
import time_machine
from starlette.types import ASGIApp

from mcp_backend.api_keys import Principal
from mcp_backend.config import McpSettings, load_settings
from mcp_backend.mcp.server import create_app
from tests.unit.endpoint_fakes import EveryoneIs, ServedInProcess

STATELESS_ERA = "2026-07-28"
HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
ALICE = "user-alice"
TASKS = "io.modelcontextprotocol/tasks"
LARGE = {"dataset_url": "https://data.example.com/big.csv", "options": {"max_rows": 500_000}}
SMALL = {"dataset_url": "https://data.example.com/small.csv", "options": {"max_rows": 1_000}}
ACCEPTED = {"confirm": {"action": "accept", "content": {"confirm": True}}}


@pytest.fixture
def settings(local) -> McpSettings:
    return load_settings(McpSettings, dict(local.stack.function("McpServer").environment))


def app_of(settings: McpSettings) -> ASGIApp:
    """One execution environment's endpoint (each serves one request here: its lifespan runs once)."""
    return create_app(settings, EveryoneIs(Principal(user_id=ALICE)), boto3.client)


def call(arguments: dict[str, Any], extra: dict[str, Any] | None = None, version: str = STATELESS_ERA) -> Any:
    meta = {"io.modelcontextprotocol/protocolVersion": version, "io.modelcontextprotocol/clientCapabilities": {}}
    params = {"name": "submit_analysis", "arguments": arguments, "_meta": meta, **(extra or {})}
    return {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params}


def task_request(method: str, params: dict[str, Any]) -> dict[str, Any]:
    """A 2026-07-28 request of a client that declares the Tasks extension."""
    capabilities: dict[str, Any] = {"extensions": {TASKS: {}}}
    meta = {
        "io.modelcontextprotocol/protocolVersion": STATELESS_ERA,
        "io.modelcontextprotocol/clientCapabilities": capabilities,
    }
    return {"jsonrpc": "2.0", "id": 9, "method": method, "params": {**params, "_meta": meta}}


async def post(app: ASGIApp, body: dict[str, Any], version: str = STATELESS_ERA) -> tuple[int, dict[str, Any]]:
    headers = {**HEADERS, "authorization": "Bearer key", "mcp-protocol-version": version}
    headers["mcp-method"] = body["method"]
    if body["method"] == "tools/call":
        headers["mcp-name"] = body["params"]["name"]
    async with ServedInProcess(app) as client:
        response = await client.post("/mcp", json=body, headers=headers)
    return response.status_code, response.json()


def exchange(*steps: tuple[ASGIApp, dict[str, Any]]) -> list[tuple[int, dict[str, Any]]]:
    async def scenario() -> list[tuple[int, dict[str, Any]]]:
        return [await post(app, body) for app, body in steps]

    return anyio.run(scenario)


def asked(app: ASGIApp, arguments: dict[str, Any] = LARGE) -> dict[str, Any]:
    [(status, answer)] = exchange((app, call(arguments)))
    assert status == 200, answer
    return answer["result"]


def test_a_large_analysis_is_confirmed_and_the_retry_is_answered_by_another_environment(settings):
    # Given two execution environments of one deployment
    first, second = app_of(settings), app_of(settings)

    # When the user submits a large analysis to the first
    question = asked(first)
    # And answers the form, the retry landing on the second
    [(status, answer)] = exchange(
        (second, call(LARGE, {"inputResponses": ACCEPTED, "requestState": question["requestState"]}))
    )

    # Then the first answer asks one form question with a JSON schema, its state sealed (not the plain text)
    assert question["resultType"] == "input_required"
    form = question["inputRequests"]["confirm"]
    assert form["method"] == "elicitation/create"
    assert form["params"]["mode"] == "form"
    assert "500,000 rows" in form["params"]["message"]
    assert form["params"]["requestedSchema"]["properties"]["confirm"]["type"] == "boolean"
    assert question["requestState"].startswith("v1.") and "confirm/v1" not in question["requestState"]
    # And the second environment opens it and queues the job
    assert status == 200
    result = answer["result"]
    assert result.get("isError") is not True, result
    assert result["structuredContent"]["status"] == "PENDING"
    assert result["structuredContent"]["jobId"]


def test_an_ordinary_analysis_is_queued_without_a_question(settings):
    # Given one environment
    app = app_of(settings)

    # When the user submits a small analysis
    result = asked(app, SMALL)

    # Then it is queued at once
    assert result.get("resultType", "complete") == "complete"
    assert result["structuredContent"]["status"] == "PENDING"


def test_a_tampered_expired_or_foreign_state_is_invalid_params(settings, local):
    # Given a question asked by one deployment, and an environment of another deployment (another key)
    app = app_of(settings)
    state = asked(app)["requestState"]
    secrets = boto3.client("secretsmanager")
    other_key = secrets.create_secret(Name="other-stack/request-state-key", SecretString="k" * 64)["ARN"]
    foreign = app_of(settings.model_copy(update={"request_state_secret_id": other_key}))
    tampered = state[:-4] + ("AAAA" if not state.endswith("AAAA") else "BBBB")

    # When the retry carries a tampered state, the state to another deployment, and the state too late
    answers = exchange(
        (app_of(settings), call(LARGE, {"inputResponses": ACCEPTED, "requestState": tampered})),
        (foreign, call(LARGE, {"inputResponses": ACCEPTED, "requestState": state})),
        # The same state for other arguments: it is bound to the call it was minted for
        (
            app_of(settings),
            call({**LARGE, "options": {"max_rows": 600_000}}, {"inputResponses": ACCEPTED, "requestState": state}),
        ),
    )
    late = app_of(settings)
    with time_machine.travel(dt.datetime.now(dt.UTC) + dt.timedelta(minutes=11)):
        answers += exchange((late, call(LARGE, {"inputResponses": ACCEPTED, "requestState": state})))

    # Then each is the spec's invalid params, with a clear message (over HTTP 400, as every -32602 of this era)
    for status, answer in answers:
        assert status == 400
        assert answer["error"]["code"] == -32602, answer
        assert answer["error"]["message"] == "Invalid or expired requestState"


FORM_MISMATCH = "inputResponses.confirm must be an elicitation result"


@pytest.mark.parametrize(
    ("responses", "message"),
    [
        ({"confirm": {"action": "accept", "content": {"confirm": "yes"}}}, FORM_MISMATCH),
        ({"confirm": {"action": "accept", "content": {"sure": True}}}, FORM_MISMATCH),
        ({}, FORM_MISMATCH),
        # Not an elicitation result at all: the SDK refuses the request's params before any handler runs
        ({"confirm": {"action": "maybe"}}, "Invalid request parameters"),
    ],
    ids=["wrong-type", "wrong-field", "missing", "wrong-action"],
)
def test_an_answer_that_does_not_fit_the_form_is_invalid_params(settings, responses, message):
    # Given a question asked
    app = app_of(settings)
    state = asked(app)["requestState"]

    # When the retry's answer does not match the requested schema
    retry = call(LARGE, {"inputResponses": responses, "requestState": state})
    [(status, answer)] = exchange((app_of(settings), retry))

    # Then it is invalid params naming the form's field (over HTTP 400, as every -32602 of this era)
    assert status == 400
    assert answer["error"]["code"] == -32602
    assert answer["error"]["message"].startswith(message)


@pytest.mark.parametrize("response", [{"action": "decline"}, {"action": "accept", "content": {"confirm": False}}])
def test_a_declined_question_queues_nothing(settings, response):
    # Given a question asked
    app = app_of(settings)
    state = asked(app)["requestState"]

    # When the user declines
    retry = call(LARGE, {"inputResponses": {"confirm": response}, "requestState": state})
    [(status, answer)] = exchange((app_of(settings), retry))

    # Then the call is a tool error saying nothing was queued
    assert status == 200
    assert answer["result"]["isError"] is True
    assert "no job was queued" in answer["result"]["content"][0]["text"]


def test_without_a_readable_key_the_tool_that_asks_answers_a_clear_error(settings):
    # Given an environment whose request-state secret cannot be read
    unreadable = settings.model_copy(update={"request_state_secret_id": "no-such-secret"})

    # When the user submits a large analysis, and replays an earlier state
    [(status, answer), (replay_status, replayed)] = exchange(
        (app_of(unreadable), call(LARGE)),
        (app_of(unreadable), call(LARGE, {"inputResponses": ACCEPTED, "requestState": "v1.AAAA"})),
    )

    # Then the call is a tool error saying the endpoint cannot ask, and the replay is invalid params
    assert status == 200 and answer["result"]["isError"] is True
    assert "cannot ask" in answer["result"]["content"][0]["text"]
    assert replay_status == 400 and replayed["error"]["code"] == -32602


def acknowledged(answer: dict[str, Any]) -> bool:
    """An empty result: nothing but the envelope every 2026-07-28 result carries."""
    return "result" in answer and set(answer["result"]) <= {"resultType", "_meta"}


def queued_messages(settings: McpSettings) -> list[str]:
    """The job ids of the messages in JobQueue now."""
    sqs = boto3.client("sqs")
    received = sqs.receive_message(
        QueueUrl=settings.job_queue_url, MaxNumberOfMessages=10, VisibilityTimeout=0, WaitTimeSeconds=0
    )
    return [json.loads(message["Body"])["jobId"] for message in received.get("Messages", [])]


def test_a_task_that_asks_waits_in_input_required_until_tasks_update_confirms_it(settings):
    # Given a client that declares the Tasks extension, calling the large analysis as a task
    [(_, created)] = exchange(
        (app_of(settings), task_request("tools/call", {"name": "analyze_dataset", "arguments": LARGE}))
    )
    task_id = created["result"]["taskId"]

    # When it reads the task, on another environment
    [(_, waiting)] = exchange((app_of(settings), task_request("tasks/get", {"taskId": task_id})))
    queued_before = queued_messages(settings)
    # And answers the question with tasks/update (on a third), and reads the task again
    update = task_request("tasks/update", {"taskId": task_id, "inputResponses": ACCEPTED})
    [(_, updated), (_, working)] = exchange(
        (app_of(settings), update), (app_of(settings), task_request("tasks/get", {"taskId": task_id}))
    )
    # And answers it once more
    [(_, again)] = exchange((app_of(settings), update))

    # Then the task waited in input_required with the form question, and no job message was queued
    assert created["result"]["resultType"] == "task"
    task = waiting["result"]
    assert task["status"] == "input_required"
    form = task["inputRequests"]["confirm"]
    assert form["method"] == "elicitation/create" and "500,000 rows" in form["params"]["message"]
    assert form["params"]["requestedSchema"]["properties"]["confirm"]["type"] == "boolean"
    assert task_id not in queued_before
    # And the answer was acknowledged, the task went on working and its job was queued exactly once
    assert acknowledged(updated) and acknowledged(again)
    assert working["result"]["status"] == "working"
    assert queued_messages(settings).count(task_id) == 1


def test_a_declined_task_is_cancelled_and_a_bad_answer_is_invalid_params(settings):
    # Given two tasks waiting for their user's answer
    body = task_request("tools/call", {"name": "analyze_dataset", "arguments": LARGE})
    [(_, first), (_, second)] = exchange((app_of(settings), body), (app_of(settings), body))
    declined, malformed = first["result"]["taskId"], second["result"]["taskId"]

    # When the user declines one, and answers the other with a value that does not fit the form
    no = {"confirm": {"action": "decline"}}
    bad = {"confirm": {"action": "accept", "content": {"confirm": "yes"}}}
    answers = exchange(
        (app_of(settings), task_request("tasks/update", {"taskId": declined, "inputResponses": no})),
        (app_of(settings), task_request("tasks/update", {"taskId": malformed, "inputResponses": bad})),
        (app_of(settings), task_request("tasks/get", {"taskId": declined})),
        (app_of(settings), task_request("tasks/get", {"taskId": malformed})),
    )

    # Then the declined task is cancelled, the bad answer is -32602 and its task still waits
    (_, ack), (bad_status, refused), (_, cancelled), (_, waiting) = answers
    assert acknowledged(ack)
    assert bad_status == 400 and refused["error"]["code"] == -32602
    assert "inputResponses.confirm" in refused["error"]["message"]
    assert cancelled["result"]["status"] == "cancelled"
    assert waiting["result"]["status"] == "input_required"
    assert declined not in queued_messages(settings) and malformed not in queued_messages(settings)


def test_a_2025_era_client_that_declared_no_elicitation_gets_a_clear_tool_error(settings):
    # Given a 2025-11-25 client that declared no elicitation (it sends no session id)
    body = {
        "jsonrpc": "2.0",
        "id": 3,
        "method": "tools/call",
        "params": {"name": "submit_analysis", "arguments": LARGE},
    }

    # When it submits a large analysis
    async def scenario() -> tuple[int, dict[str, Any]]:
        return await post(app_of(settings), body, version="2025-11-25")

    status, answer = anyio.run(scenario)

    # Then the call is a tool error saying why it cannot be asked, and nothing is queued
    assert status == 200
    assert answer["result"]["isError"] is True
    assert "did not declare elicitation" in answer["result"]["content"][0]["text"]
    assert queued_messages(settings) == []
