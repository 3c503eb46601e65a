"""With the edge on, McpServer admits only requests that came through CloudFront (its secret origin header,
the current or the previous value during a rotation) or were signed by an IAM caller; anything else is 403."""

from __future__ import annotations

import json

import anyio
import httpx
import pytest

from mcp_backend.edge_origin import EdgeOriginCheck, EdgeOriginUnavailable
from mcp_backend.mcp.iam_callers import signed_by_iam_caller
from mcp_backend.mcp.server import create_app
from tests.unit.endpoint_fakes import SETTINGS, EveryoneIsAlice, RoomyRateTable, ServedInProcess

CURRENT, PREVIOUS = "c" * 40, "p" * 40
IAM_CONTEXT = json.dumps(
    {"authorizer": {"iam": {"accountId": "123456789012", "callerId": "AROAX:s", "userArn": "arn:aws:sts::1:x"}}}
)


class Secret:
    def __init__(self, value: str) -> None:
        self.value, self.reads = value, 0

    def __call__(self) -> str:
        self.reads += 1
        return self.value


def check(secret: Secret, now: list[float] | None = None) -> EdgeOriginCheck:
    clock = now if now is not None else [0.0]
    return EdgeOriginCheck(secret, clock=lambda: clock[0], cache_seconds=300, exempt=signed_by_iam_caller)


@pytest.mark.parametrize(
    ("headers", "admitted"),
    [
        ([(b"x-origin-verify", CURRENT.encode())], True),
        ([(b"X-Origin-Verify", PREVIOUS.encode())], True),
        ([], False),
        ([(b"x-origin-verify", b"")], False),
        ([(b"x-origin-verify", b"c" * 39)], False),
        ([(b"x-amzn-request-context", IAM_CONTEXT.encode())], True),
        ([(b"x-amzn-request-context", b'{"http":{"sourceIp":"198.51.100.7"}}')], False),
    ],
    ids=["current", "previous", "none", "empty", "wrong", "iam-signed", "no-authorizer"],
)
def test_only_the_edges_header_or_an_iam_signature_is_admitted(headers, admitted):
    # Given the origin secret with a current and a previous value
    edge = check(Secret(json.dumps({"current": CURRENT, "previous": PREVIOUS})))
    # When a request with these headers arrives
    # Then it is admitted only through CloudFront or signed by an IAM caller
    assert edge.admits(headers) is admitted


def test_the_secret_is_read_once_per_cache_interval():
    # Given a check and a clock
    secret, now = Secret(json.dumps({"current": CURRENT})), [0.0]
    edge = check(secret, now)
    # When requests arrive within and after the interval
    edge.admits([(b"x-origin-verify", CURRENT.encode())])
    edge.admits([(b"x-origin-verify", CURRENT.encode())])
    now[0] = 301.0
    edge.admits([(b"x-origin-verify", CURRENT.encode())])
    # Then the secret was read once per interval
    assert secret.reads == 2


@pytest.mark.parametrize("value", ["not json", json.dumps({"current": "short"}), json.dumps(["x"])])
def test_an_unusable_secret_is_unavailable_never_open(value):
    # Given a secret that is not the expected document
    edge = check(Secret(value))
    # When a request with some header arrives
    # Then the check raises EdgeOriginUnavailable (503 at the caller) and names no value
    with pytest.raises(EdgeOriginUnavailable) as raised:
        edge.admits([(b"x-origin-verify", b"short")])
    assert "short" not in str(raised.value)


LIST = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
HEADERS = {
    "accept": "application/json, text/event-stream",
    "content-type": "application/json",
    "authorization": "Bearer k",
}


def endpoint_answers(edge: EdgeOriginCheck | None, *extra: dict[str, str]) -> list[httpx.Response]:
    app = create_app(
        SETTINGS, authenticator=EveryoneIsAlice(), client_factory=lambda service: RoomyRateTable(), edge_check=edge
    )

    async def scenario() -> list[httpx.Response]:
        async with ServedInProcess(app) as client:
            return [await client.post("/mcp", json=LIST, headers={**HEADERS, **headers}) for headers in extra]

    return anyio.run(scenario)


def test_with_the_edge_on_the_endpoint_refuses_a_request_that_went_around_it():
    # Given the endpoint with the edge on
    edge = check(Secret(json.dumps({"current": CURRENT})))
    # When one request comes without the origin header, one with a wrong value and one through CloudFront
    around, wrong, through = endpoint_answers(edge, {}, {"x-origin-verify": "x" * 40}, {"x-origin-verify": CURRENT})
    # Then the first two are refused with 403 before authentication, the third is answered
    assert (around.status_code, wrong.status_code) == (403, 403)
    assert "www-authenticate" not in around.headers
    assert through.status_code == 200 and through.json()["result"]["tools"]


def test_with_the_secret_unreadable_the_endpoint_answers_503_never_lets_in():
    # Given the edge on and its secret unreadable
    def unreadable() -> str:
        raise OSError("connection refused")

    # When a request comes with some header
    (answer,) = endpoint_answers(EdgeOriginCheck(unreadable, clock=lambda: 0.0), {"x-origin-verify": CURRENT})
    # Then it is a 503 with Retry-After, and the error text does not leak
    assert answer.status_code == 503 and answer.headers["retry-after"] == "5"
    assert "refused" not in answer.text


def test_with_the_edge_off_a_request_needs_no_origin_header():
    # Given the endpoint with the edge off (no EDGE_ORIGIN_SECRET_ID)
    # When a request comes directly
    (answer,) = endpoint_answers(None, {})
    # Then it is answered
    assert answer.status_code == 200
