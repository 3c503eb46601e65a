"""A 2025-11-25 client that declared elicitation is asked on its call's open event stream, with the MCP Python SDK's
own client and its elicitation callback, against the endpoint on loopback (the template's tables on moto): a large
submit_analysis asks for confirmation, and the answer may be received by another execution environment (a second
app sharing only the tables and the request-state key), which hands it to the call that waits."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import ElicitRequestParams, ElicitResult

from mcp_backend.config import McpSettings, load_settings
from tests.e2e.conftest import Endpoint
from tests.functions.test_mcp_elicitation import LARGE, queued_messages

pytestmark = pytest.mark.e2e


class AnswersElsewhere(httpx.AsyncBaseTransport):
    """A load balancer between two execution environments: every POST that carries a JSON-RPC response (the
    client's answer to the server) goes to `elsewhere`; the rest to the URL the client named."""

    def __init__(self, elsewhere: str | None) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.elsewhere = httpx.URL(elsewhere) if elsewhere else None
        self.answers: list[int] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = await request.aread()
        message = json.loads(body) if request.method == "POST" and body else None
        if isinstance(message, dict) and "method" not in message and self.elsewhere is not None:
            request.url = self.elsewhere
            response = await self.inner.handle_async_request(request)
            self.answers.append(response.status_code)
            return response
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


@asynccontextmanager
async def client_of(endpoint: Endpoint, answer: ElicitResult, elsewhere: str | None = None) -> AsyncIterator[Any]:
    """The SDK's client in the 2025 era (initialize handshake) that answers every question with `answer`."""
    transport = AnswersElsewhere(elsewhere)
    questions: list[ElicitRequestParams] = []

    async def on_question(context: Any, params: ElicitRequestParams) -> ElicitResult:
        questions.append(params)
        return answer

    headers = {"authorization": f"Bearer {endpoint.alice_key}"}
    timeout = httpx.Timeout(30.0, read=120.0)
    async with httpx.AsyncClient(headers=headers, transport=transport, timeout=timeout) as http:
        client = Client(streamable_http_client(endpoint.url, http_client=http), mode="legacy")
        client.elicitation_callback = on_question
        async with client:
            yield client, questions, transport


def submit_large(endpoint: Endpoint, answer: ElicitResult, elsewhere: str | None = None) -> tuple[Any, list, list]:
    async def scenario() -> tuple[Any, list, list]:
        async with client_of(endpoint, answer, elsewhere) as (client, questions, transport):
            assert client.protocol_version == "2025-11-25"
            result = await client.call_tool("submit_analysis", LARGE)
            return result, questions, transport.answers

    return anyio.run(scenario)


def queued(endpoint: Endpoint) -> list[str]:
    """The job ids in JobQueue now."""
    environment = dict(endpoint.local.stack.function("McpServer").environment)
    return queued_messages(load_settings(McpSettings, environment))


CONFIRMED = ElicitResult(action="accept", content={"confirm": True})


def test_the_sdk_client_is_asked_on_the_stream_and_its_confirmed_job_is_queued(endpoint):
    # Given the SDK's client of the 2025 era with an elicitation callback that confirms
    # When it submits a large analysis
    result, questions, _ = submit_large(endpoint, CONFIRMED)

    # Then it was asked once, with the confirmation form, and the job is queued
    assert [question.requested_schema["required"] for question in questions] == [["confirm"]]
    assert "500000" in questions[0].message.replace(",", "")
    assert not result.is_error, result.content
    assert result.structured_content["status"] == "PENDING"
    assert result.structured_content["jobId"] in queued(endpoint)


def test_the_answer_received_by_another_environment_reaches_the_waiting_call(endpoint_factory):
    # Given two execution environments of the endpoint that share only the tables and the key
    first, second = endpoint_factory(), endpoint_factory()

    # When the client's answer to the first environment's question is sent to the second
    result, questions, answers = submit_large(first, CONFIRMED, elsewhere=second.url)

    # Then the second accepted it (202) and the call waiting on the first went on with it
    assert len(questions) == 1
    assert answers == [202]
    assert not result.is_error, result.content
    assert result.structured_content["jobId"] in queued(first)


def test_a_declined_question_queues_nothing(endpoint):
    # Given a client whose user declines
    # When it submits a large analysis
    result, questions, _ = submit_large(endpoint, ElicitResult(action="decline"))

    # Then it was asked, and the call is a tool error that says no job was queued
    assert len(questions) == 1
    assert result.is_error
    assert "no job was queued" in result.content[0].text
    assert queued(endpoint) == []
