"""A tools/call leaves nothing for the cyclic garbage collector: what a request made is freed by reference
counting when the request ends. An exception that crosses from a worker thread back to the event loop is held by
the future that carried it, and its traceback holds the frame that holds the future: a cycle that kept the
request's objects (its frames, the SDK's session and streams) alive until the collector ran, and made it run
more often and for longer on every call that reported a failure."""

from __future__ import annotations

import base64
import gc
import json
import types
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import anyio
import pytest

from mcp_backend.mcp.server import create_app
from mcp_backend.mcp.worker_threads import run_in_worker_thread
from tests.unit.endpoint_fakes import SETTINGS, EveryoneIsAlice, RoomyRateTable, ServedInProcess
from tests.unit.test_oauth import RESOURCE, RSA_KEY, StubIssuer, claims, jwk, oauth, token

HEADERS = {
    "accept": "application/json, text/event-stream",
    "content-type": "application/json",
    "authorization": "Bearer key",
}


class NoJobs(RoomyRateTable):
    """A JobTable that holds no job (and a rate table that admits every request)."""

    def get_item(self, **request: Any) -> dict[str, Any]:
        return {}


class QuietKinesis:
    def put_records(self, StreamName: str, Records: list[dict[str, Any]]) -> dict[str, Any]:
        return {"FailedRecordCount": 0, "Records": [{"SequenceNumber": "1", "ShardId": "s"} for _ in Records]}


@contextmanager
def unreachable_objects() -> Iterator[list[Any]]:
    """What the cyclic collector would free, gathered once the block ends (collector paused meanwhile)."""
    found: list[Any] = []
    gc.collect()
    gc.disable()
    try:
        yield found
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        found.extend(gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


def ours(thing: Any) -> bool:
    """An exception of our modules, or a frame running their code."""
    if isinstance(thing, BaseException):
        return type(thing).__module__.startswith("mcp_backend")
    return isinstance(thing, types.FrameType) and "mcp_backend" in thing.f_code.co_filename


@pytest.mark.parametrize("arguments", [{"job_id": "0" * 32}, {"job_id": "not-a-job"}])
def test_a_tool_call_that_reports_a_failure_leaves_no_cycle_of_its_frames(arguments):
    # Given the endpoint over a JobTable with no jobs, served in-process and warmed by one call
    rates = NoJobs()
    app = create_app(
        SETTINGS,
        authenticator=EveryoneIsAlice(),
        client_factory=lambda service: QuietKinesis() if service == "kinesis" else rates,
    )
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "get_job", "arguments": arguments}}

    async def scenario() -> list[dict[str, Any]]:
        async with ServedInProcess(app) as client:
            await client.post("/mcp", json=call, headers=HEADERS)
            # When get_job is called for a job that is not there (a failure the tool reports), several times
            with unreachable_objects() as leftovers:
                answers = [(await client.post("/mcp", json=call, headers=HEADERS)).json() for _ in range(5)]
            found.extend(thing for thing in leftovers if ours(thing))
        return answers

    found: list[Any] = []
    answers = anyio.run(scenario)

    # Then each call was answered with the tool's error
    assert [answer["result"]["isError"] for answer in answers] == [True] * 5
    # And none of our exceptions or frames were left for the cyclic collector
    assert [type(thing).__name__ for thing in found] == []


class Refused(Exception):
    pass


def test_an_exception_from_a_worker_thread_is_raised_with_its_type_and_left_in_no_cycle():
    # Given blocking work that fails
    def refuse(reason: str) -> None:
        raise Refused(reason)

    async def scenario() -> str:
        # When it runs on a worker thread and the caller catches what it raised
        try:
            await run_in_worker_thread(refuse, "not yours")
        except Refused as refused:
            return str(refused)
        return "not raised"

    with unreachable_objects() as leftovers:
        caught = anyio.run(scenario)

    # Then the caller got the exception itself, and nothing held it in a cycle
    assert caught == "not yours"
    assert [thing for thing in leftovers if isinstance(thing, Refused)] == []


def test_a_worker_threads_result_is_returned():
    # Given blocking work that succeeds; When it runs on a worker thread; Then its result is returned
    assert anyio.run(run_in_worker_thread, lambda a, b: a + b, 2, 3) == 5


def test_a_refused_access_token_leaves_no_cycle_of_its_frames():
    # Given an OAuth resource server and a token whose payload was swapped for another subject's
    authenticator = oauth(StubIssuer(jwk(RSA_KEY, "k1")))
    header, _, signature = token().split(".")
    forged = base64.urlsafe_b64encode(json.dumps(claims(sub="user-admin")).encode()).rstrip(b"=").decode()
    anyio.run(authenticator.authenticate, token(), RESOURCE)  # the keys fetched once

    # When it is presented, several times
    with unreachable_objects() as leftovers:
        principals = [
            anyio.run(authenticator.authenticate, f"{header}.{forged}.{signature}", RESOURCE) for _ in range(5)
        ]

    # Then every one was refused, and none of our exceptions or frames were left for the cyclic collector
    assert principals == [None] * 5
    assert [type(thing).__name__ for thing in leftovers if ours(thing)] == []
