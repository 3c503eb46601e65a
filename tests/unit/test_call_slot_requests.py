"""Which requests hold a calls-in-flight slot, as the door table decides it: a call of a tool that reaches the
network, and a request that waits for a task (2025-11-25 tasks/result), however the client spells it in JSON;
nothing else."""

from __future__ import annotations

import json

import pytest

from mcp_backend.doors import METHODS, TOOL_DOORS, Door, DoorTable

DOORS = DoorTable(METHODS, TOOL_DOORS)


def holds_a_call_slot(body: bytes) -> bool:
    door = DOORS.decide(body)
    return isinstance(door, Door) and door.slot


def request(method: str, params: dict | None = None, request_id: int = 1) -> dict:
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params or {}}


RESULT = request("tasks/result", {"taskId": "j-1"})


@pytest.mark.parametrize(
    "body",
    [
        json.dumps(RESULT).encode(),
        json.dumps(RESULT).replace("tasks/result", "tasks\\/result").encode(),  # JSON's escaped solidus
        json.dumps(RESULT).replace("tasks/result", "tasks\\u002fresult").encode(),
        json.dumps([request("ping"), RESULT]).encode(),  # a batch
        json.dumps(request("tools/call", {"name": "analyze_dataset", "arguments": {}})).encode(),
    ],
    ids=["tasks/result", "escaped solidus", "unicode escape", "in a batch", "network tool"],
)
def test_a_waiting_request_or_a_network_call_holds_a_slot(body):
    # Given a body that waits for a task or calls a network tool, however it is spelled
    # When the guard asks whether it holds a slot / Then it does
    assert holds_a_call_slot(body)


@pytest.mark.parametrize(
    "body",
    [
        json.dumps(request("tasks/get", {"taskId": "j-1"})).encode(),
        json.dumps(request("tasks/cancel", {"taskId": "j-1"})).encode(),
        json.dumps(request("tools/call", {"name": "get_job", "arguments": {"jobId": "tasks/result"}})).encode(),
        json.dumps(request("tools/call", {"name": "tasks/result", "arguments": {}})).encode(),
        b'{"method": "tasks/result"',  # the SDK refuses it before anything runs
    ],
    ids=["tasks/get", "tasks/cancel", "named in arguments", "a tool of that name", "malformed"],
)
def test_other_requests_hold_no_slot(body):
    # Given a body that answers at once (or that the SDK refuses)
    # When the guard asks whether it holds a slot / Then it does not
    assert not holds_a_call_slot(body)
