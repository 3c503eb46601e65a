"""A failure nobody planned for, anywhere inside the SDK's request handling (a middleware, a metric, a method
handler), is answered as JSON-RPC's internal error without its text: the SDK's own answer to an exception it does
not know is code 0 with the exception's message, which may hold anything. And a tool-run metric that cannot be
written never fails the call it measures."""

from __future__ import annotations

from contextlib import contextmanager

import anyio
import pytest
from aws_lambda_powertools.metrics import EphemeralMetrics

from mcp_backend.mcp.server import create_app
from mcp_backend.observability import ToolRunMetrics, tool_runs
from tests.unit.endpoint_fakes import SETTINGS, EveryoneIsAlice, RoomyRateTable, ServedInProcess

HEADERS = {
    "accept": "application/json, text/event-stream",
    "content-type": "application/json",
    "authorization": "Bearer k",
}
SECRET = "arn:aws:secretsmanager:us-east-1:123456789012:secret:internal-detail"


def answer(body: dict) -> dict:
    app = create_app(SETTINGS, authenticator=EveryoneIsAlice(), client_factory=lambda service: RoomyRateTable())

    async def scenario() -> dict:
        async with ServedInProcess(app) as client:
            response = await client.post("/mcp", json=body, headers=HEADERS)
            assert response.status_code == 200, response.text
            return response.json()

    return anyio.run(scenario)


def test_an_unexpected_failure_in_a_middleware_is_an_internal_error_without_its_text(monkeypatch):
    # Given a step inside the SDK's handling that fails in a way nobody planned for, naming an internal detail
    @contextmanager
    def failing_run(tool_name: str):
        raise RuntimeError(f"cannot reach {SECRET}")
        yield

    monkeypatch.setattr(tool_runs, "run", failing_run)

    # When a tool is called
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "list_endpoints", "arguments": {}}}
    error = answer(body)["error"]

    # Then the answer is JSON-RPC's internal error, and the failure's text is not in it
    assert error["code"] == -32603
    assert error["message"] == "Internal error"
    assert SECRET not in str(error)


@pytest.mark.parametrize("method", ["tools/list", "ping"])
def test_requests_not_calling_a_tool_are_answered_as_before(method):
    # When a request that is not a tool call is sent
    reply = answer({"jsonrpc": "2.0", "id": 1, "method": method, "params": {}})

    # Then it is answered with its result, untouched by the failure handling
    assert "result" in reply, reply


def test_a_tool_run_metric_that_cannot_be_written_never_fails_the_run(monkeypatch, caplog):
    # Given tool-run metrics whose metric set cannot be written (no namespace: Powertools refuses the blob)
    monkeypatch.delenv("POWERTOOLS_METRICS_NAMESPACE", raising=False)
    runs = ToolRunMetrics(interval_seconds=0)
    runs._emf = EphemeralMetrics(service="svc", namespace=None)

    # When a run ends (and its runs are due, so they are flushed at once)
    with runs.run("get_job"):
        outcome = "ran"

    # Then the run is unharmed, and the drop is logged as a warning naming only the tool
    assert outcome == "ran"
    [record] = [record for record in caplog.records if "tool-run metrics dropped" in record.getMessage()]
    assert record.levelname == "WARNING"
