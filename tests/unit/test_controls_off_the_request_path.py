"""The per-request controls stay off the request path's DynamoDB in the common case: a caller's OAuth access
token (ES256, as the stack's own authorization server signs them) is checked against cached keys, the request
rate against the instance's lease, and a call of a tool that reaches the network starts on the slot its
instance kept from the caller's previous call. Each DynamoDB request is counted with whether it was made on the
request's own path before its answer was sent; what runs off the path (a lease ahead, a slot's extension) runs on
threads of its own, as the endpoint runs it, and is finished before the next request."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

import anyio

from mcp_backend.jwks import JwksCache
from mcp_backend.mcp.oauth import OAuthAuthenticator
from mcp_backend.mcp.server import create_app
from tests.instants import minute_start
from tests.unit.endpoint_fakes import SETTINGS, ServedInProcess
from tests.unit.test_oauth import EC_KEY, ISSUER, RESOURCE, StubIssuer, jwk, policy, token

CALLS = 10
# Within one rate window whenever the test runs: with the wall clock, a minute turning mid-test made the next call
# lease the new window's block on its path (a new window always does).
IN_ONE_WINDOW = minute_start() + 1  # a second into an epoch minute
HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


class CountedDynamoDB:
    """RateLimitTable and JobTable as one fake: every conditional write succeeds, no job exists. Each request is
    recorded with whether the current request's answer had been sent."""

    def __init__(self) -> None:
        self.answered = False
        self.requests: list[tuple[str, bool]] = []

    def update_item(self, **request: Any) -> dict[str, Any]:
        self._record(request["Key"]["id"]["S"].split("#")[0])
        return {}

    def get_item(self, **request: Any) -> dict[str, Any]:
        self._record("job")
        return {}

    def _record(self, what: str) -> None:
        off_the_path = threading.current_thread().name == OFF_THE_PATH
        self.requests.append((what, self.answered or off_the_path))

    def before_answer(self) -> list[str]:
        return [what for what, answered in self.requests if not answered]


OFF_THE_PATH = "off-the-path"


class OffThePath:
    """The endpoint's background executor (a thread per piece of work), whose threads the test can wait for."""

    def __init__(self) -> None:
        self.started: list[threading.Thread] = []

    def __call__(self, work: Callable[[], None]) -> None:
        thread = threading.Thread(target=work, name=OFF_THE_PATH, daemon=True)
        self.started.append(thread)
        thread.start()

    def finish(self) -> None:
        while self.started:
            self.started.pop().join(10)


def marking_answers(app: Any, dynamodb: CountedDynamoDB) -> Any:
    """The app, with `dynamodb.answered` set once a response's last body chunk has been sent."""

    async def wrapped(scope, receive, send) -> None:
        async def marked(message: dict[str, Any]) -> None:
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                dynamodb.answered = True

        await app(scope, receive, marked)

    return wrapped


def served_calls(tool: str, arguments: dict[str, Any]) -> tuple[list[list[str]], list[int]]:
    """CALLS + 1 tools/call requests of one OAuth caller, one after another: the DynamoDB requests each made before
    its answer, and each answer's HTTP status."""
    dynamodb, later = CountedDynamoDB(), OffThePath()
    issuer = StubIssuer(jwk(EC_KEY, "k1", "ES256"))
    authenticator = OAuthAuthenticator(policy(tier_claim="tier"), JwksCache(ISSUER, f"{ISSUER}jwks", issuer))
    settings = SETTINGS.model_copy(update={"oauth_resource": RESOURCE})
    app = create_app(
        settings,
        authenticator=authenticator,
        client_factory=lambda service: dynamodb,
        rate_limit_clock=lambda: IN_ONE_WINDOW,
        lease_ahead=later,
    )
    bearer = {"authorization": f"Bearer {token(EC_KEY, alg='ES256', tier='free')}", **HEADERS}
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}

    async def scenario() -> tuple[list[list[str]], list[int]]:
        on_the_path, statuses = [], []
        async with ServedInProcess(marking_answers(app, dynamodb)) as client:
            for _ in range(CALLS + 1):
                dynamodb.answered, dynamodb.requests = False, []
                response = await client.post("/mcp", content=json.dumps(body), headers=bearer)
                statuses.append(response.status_code)
                on_the_path.append(dynamodb.before_answer())
                later.finish()
        return on_the_path, statuses

    return anyio.run(scenario)


def test_an_oauth_callers_get_job_reads_only_its_job_before_the_answer():
    # Given an OAuth caller of the free tier (120 requests a minute: leases of 12)
    # When it calls get_job eleven times
    on_the_path, statuses = served_calls("get_job", {"job_id": "0" * 32})

    # Then after the first (which leased the minute's first block) each call's only DynamoDB request before its
    # answer is the job's own read: no token check and no rate-limit write reaches DynamoDB
    assert statuses == [200] * (CALLS + 1)
    assert on_the_path[0] == ["requests", "job"]
    assert on_the_path[1:] == [["job"]] * CALLS


def test_a_network_tools_calls_in_a_row_start_on_the_kept_slot_without_a_dynamodb_request():
    # Given an OAuth caller of the free tier (2 calls in flight)
    # When it calls analyze_dataset (a tool that reaches the network; this source is refused at once) eleven times
    on_the_path, statuses = served_calls("analyze_dataset", {"dataset_url": "http://127.0.0.1:9/data.csv"})

    # Then the first took the rate lease and a slot before it ran, and every later one made no DynamoDB request
    # before its answer: the slot kept from the call before, extended and given back off the path
    assert statuses == [200] * (CALLS + 1)
    assert sorted(on_the_path[0]) == ["inflight", "requests"]
    assert on_the_path[1:] == [[]] * CALLS
