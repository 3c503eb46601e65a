"""The endpoint's HTTP semantics with a raw client (httpx): what real MCP clients and proxies trip on."""

from __future__ import annotations

import dataclasses
import io
import json
import logging
import time

import httpx
import pytest

from devstack.wired_stack import local_dataset_url
from tests.e2e.conftest import ALLOWED_ORIGIN, TEST_KEEPALIVE_SECONDS

LIST_TOOLS = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
MODERN = "2026-07-28"
MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
}


def sse_messages(body: str) -> list[dict]:
    return [json.loads(line[len("data: ") :]) for line in body.splitlines() if line.startswith("data: ")]


def rpc_messages(response: httpx.Response) -> list[dict]:
    """The JSON-RPC messages of an answer, whichever form the server chose: one JSON body or an event stream."""
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        return sse_messages(response.text)
    return [response.json()]


def assert_safe(response: httpx.Response) -> None:
    """No server error status and nothing of a stack trace, whatever the request."""
    assert response.status_code < 500, (response.status_code, response.text)
    for marker in ("Traceback", 'File "', "Exception", "site-packages"):
        assert marker not in response.text, response.text


@pytest.mark.parametrize("method", ["GET", "DELETE"])
@pytest.mark.parametrize("path", ["/mcp", "/mcp/"])
def test_get_and_delete_are_405_allowing_only_post(endpoint, method, path):
    # When a client opens the legacy GET stream or deletes a session
    url = endpoint.url.removesuffix("/mcp") + path
    response = httpx.request(method, url, headers=endpoint.headers(endpoint.alice_key))

    # Then it is told only POST exists, with no stream opened
    assert response.status_code == 405
    assert response.headers["allow"] == "POST"
    assert_safe(response)


def test_trailing_slash_is_the_same_endpoint_never_a_redirect(endpoint):
    response = httpx.post(endpoint.url + "/", json=LIST_TOOLS, headers=endpoint.headers(endpoint.alice_key))

    assert response.status_code == 200
    assert [m["id"] for m in rpc_messages(response)] == [1]
    assert_safe(response)


def test_a_notification_is_accepted_with_202_and_no_body(endpoint):
    notification = {"jsonrpc": "2.0", "method": "notifications/initialized"}

    response = httpx.post(endpoint.url, json=notification, headers=endpoint.headers(endpoint.alice_key))

    assert response.status_code == 202
    assert response.content == b""


def test_a_modern_era_notification_is_accepted_with_202(endpoint):
    notification = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 7}}
    headers = endpoint.headers(endpoint.alice_key, **{"mcp-protocol-version": MODERN})

    response = httpx.post(endpoint.url, json=notification, headers=headers)

    assert response.status_code == 202
    assert response.content == b""


@pytest.mark.parametrize(
    ("extra", "status"),
    [
        ({"origin": "https://evil.example"}, 403),
        ({"origin": ALLOWED_ORIGIN}, 200),
        ({"host": "attacker.example"}, 421),
        ({"host": "abc123.lambda-url.us-east-1.on.aws"}, 200),  # the region's Function URL form
        ({"host": "abc123.lambda-url.eu-west-1.on.aws"}, 421),  # another region's URL is not this function
    ],
)
def test_origin_and_host_are_checked_against_configuration(endpoint, extra, status):
    response = httpx.post(endpoint.url, json=LIST_TOOLS, headers=endpoint.headers(endpoint.alice_key, **extra))

    assert response.status_code == status
    assert_safe(response)


@pytest.mark.parametrize(
    "authorization",
    [None, "Bearer mcpk_not-a-real-key", "Bearer not-even-a-key", "Basic dXNlcjpwYXNz", "bearer"],
)
def test_missing_or_invalid_key_is_401_with_a_bearer_challenge(endpoint, authorization):
    headers = endpoint.headers()
    if authorization is not None:
        headers["authorization"] = authorization

    response = httpx.post(endpoint.url, json=LIST_TOOLS, headers=headers)

    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Bearer")
    assert_safe(response)


@pytest.mark.parametrize("accept", ["text/html", "application/json", "text/event-stream"])
def test_an_accept_header_without_json_and_event_stream_is_406(endpoint, accept):
    response = httpx.post(endpoint.url, json=LIST_TOOLS, headers=endpoint.headers(endpoint.alice_key, accept=accept))

    assert response.status_code == 406
    assert_safe(response)


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", ""])
def test_a_non_json_content_type_is_415(endpoint, content_type):
    headers = endpoint.headers(endpoint.alice_key, **{"content-type": content_type})

    response = httpx.post(endpoint.url, content=json.dumps(LIST_TOOLS), headers=headers)

    assert response.status_code == 415
    assert_safe(response)


def test_json_with_a_charset_parameter_is_accepted(endpoint):
    headers = endpoint.headers(endpoint.alice_key, **{"content-type": "application/json; charset=utf-8"})

    response = httpx.post(endpoint.url, content=json.dumps(LIST_TOOLS).encode(), headers=headers)

    assert response.status_code == 200
    assert rpc_messages(response)[0]["result"]["tools"]


@pytest.mark.parametrize("era", ["legacy", MODERN])
@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list"', -32700),
        (json.dumps({"jsonrpc": "2.0", "id": 1, "method": "no/such/method"}).encode(), -32601),
        (
            json.dumps(
                {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "get_job", "arguments": []}}
            ).encode(),
            -32602,
        ),
    ],
)
def test_json_rpc_errors_carry_the_standard_codes(endpoint, era, body, code):
    headers = endpoint.headers(endpoint.alice_key)
    if era == MODERN:
        decoded = json.loads(body) if code != -32700 else None
        if decoded is not None:
            decoded.setdefault("params", {})["_meta"] = MODERN_META
            headers["mcp-method"] = decoded["method"]
            if decoded["method"] == "tools/call":
                headers["mcp-name"] = decoded["params"]["name"]
            body = json.dumps(decoded).encode()
        headers["mcp-protocol-version"] = MODERN

    response = httpx.post(endpoint.url, content=body, headers=headers)

    messages = rpc_messages(response)
    assert messages[-1]["error"]["code"] == code
    assert_safe(response)


def test_repeated_tool_lists_in_alternating_eras_each_answer_their_eras_list_and_bad_params_stay_errors(endpoint):
    """tools/list answers are kept per protocol version and params: never one era's answer for another,
    never an answer for params the SDK rejects."""

    def list_tools(era: str, params: dict | None = None) -> dict:
        headers = endpoint.headers(endpoint.alice_key)
        body: dict = {**LIST_TOOLS, "params": dict(params or {})}
        if era == MODERN:
            body["params"]["_meta"] = MODERN_META
            headers.update({"mcp-protocol-version": MODERN, "mcp-method": "tools/list"})
        response = httpx.post(endpoint.url, json=body, headers=headers)
        assert_safe(response)
        return rpc_messages(response)[-1]

    # Given a tools/list answered once in each era
    first = {era: list_tools(era) for era in ("legacy", MODERN)}

    # When both eras ask again, interleaved, and then with a malformed cursor
    again = {era: list_tools(era) for era in (MODERN, "legacy")}
    malformed = {era: list_tools(era, {"cursor": 5}) for era in ("legacy", MODERN)}

    # Then each era gets its own era's list again: the modern one stamped complete, the legacy one not
    assert again == first
    assert first[MODERN]["result"]["resultType"] == "complete"
    assert "resultType" not in first["legacy"]["result"]
    # And only the modern list carries the cache hints (the legacy wire has no such fields); both carry each tool's
    # annotations and typed output schema
    assert (first[MODERN]["result"]["ttlMs"], first[MODERN]["result"]["cacheScope"]) == (3_600_000, "public")
    assert not {"ttlMs", "cacheScope"} & set(first["legacy"]["result"])
    for era in ("legacy", MODERN):
        assert all({"annotations", "outputSchema"} <= set(t) for t in first[era]["result"]["tools"])
    assert {t["name"] for t in first["legacy"]["result"]["tools"]} == {
        t["name"] for t in first[MODERN]["result"]["tools"]
    }
    # And malformed params are still the SDK's invalid-params error
    assert [malformed[era]["error"]["code"] for era in ("legacy", MODERN)] == [-32602, -32602]


def test_a_modern_request_whose_mcp_method_header_disagrees_with_its_body_is_rejected(endpoint):
    body = {**LIST_TOOLS, "params": {"_meta": MODERN_META}}
    headers = endpoint.headers(endpoint.alice_key, **{"mcp-protocol-version": MODERN, "mcp-method": "tools/call"})

    response = httpx.post(endpoint.url, json=body, headers=headers)

    assert response.status_code == 400
    assert response.json()["error"]["code"] not in (-32603,)
    assert_safe(response)


def test_server_discover_answers_without_initialize_and_lists_both_eras(endpoint):
    body = {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": MODERN_META}}
    headers = endpoint.headers(endpoint.alice_key, **{"mcp-protocol-version": MODERN, "mcp-method": "server/discover"})

    response = httpx.post(endpoint.url, json=body, headers=headers)

    result = rpc_messages(response)[-1]["result"]
    assert MODERN in result["supportedVersions"]


@pytest.mark.parametrize("era", ["legacy", MODERN])
def test_no_session_id_is_issued_and_a_sent_one_is_ignored(endpoint, era):
    headers = endpoint.headers(endpoint.alice_key, **{"mcp-session-id": "stale-session-from-another-server"})
    body = dict(LIST_TOOLS)
    if era == MODERN:
        body["params"] = {"_meta": MODERN_META}
        headers.update({"mcp-protocol-version": MODERN, "mcp-method": "tools/list"})

    response = httpx.post(endpoint.url, json=body, headers=headers)

    assert response.status_code == 200
    assert "mcp-session-id" not in response.headers
    assert rpc_messages(response)[-1]["result"]["tools"]


def test_a_legacy_initialize_negotiates_a_handshake_version_without_a_session(endpoint):
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}},
    }

    response = httpx.post(endpoint.url, json=body, headers=endpoint.headers(endpoint.alice_key))

    assert response.status_code == 200
    assert "mcp-session-id" not in response.headers
    assert rpc_messages(response)[-1]["result"]["protocolVersion"] == "2025-03-26"


def analysis_call(request_id: int = 9, meta: dict | None = None) -> dict:
    params = {
        "name": "analyze_dataset",
        "arguments": {"dataset_url": local_dataset_url("apikey:user-alice", "sales.csv")},
    }
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {**params, **({"_meta": meta} if meta else {})},
    }


READY_AT_ONCE = [
    ("legacy", LIST_TOOLS),
    ("legacy", {"jsonrpc": "2.0", "id": 2, "method": "ping"}),
    (
        "legacy",
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "list_endpoints", "arguments": {}}},
    ),
    (MODERN, LIST_TOOLS),
    (MODERN, {"jsonrpc": "2.0", "id": 5, "method": "server/discover"}),
    (
        MODERN,
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "list_endpoints", "arguments": {}}},
    ),
]


@pytest.mark.parametrize(("era", "request_body"), READY_AT_ONCE, ids=lambda v: v if isinstance(v, str) else v["method"])
def test_an_answer_ready_at_once_is_one_json_body(endpoint, era, request_body):
    # Given a request whose result is ready at once, in either protocol era
    body = json.loads(json.dumps(request_body))
    headers = endpoint.headers(endpoint.alice_key)
    if era == MODERN:
        body.setdefault("params", {})["_meta"] = MODERN_META
        headers.update({"mcp-protocol-version": MODERN, "mcp-method": body["method"]})
        if body["method"] == "tools/call":
            headers["mcp-name"] = body["params"]["name"]

    # When it is posted
    response = httpx.post(endpoint.url, json=body, headers=headers)

    # Then the answer is one application/json body (the specification allows it for every POST), not a stream
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    assert response.json()["id"] == body["id"]
    assert "result" in response.json()


def test_a_call_with_a_progress_token_is_answered_as_a_stream(endpoint):
    # Given a quiet tool called with a progress token
    body = {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "list_endpoints", "arguments": {}}}
    body["params"]["_meta"] = {"progressToken": "p-1"}

    # When it is posted
    response = httpx.post(endpoint.url, json=body, headers=endpoint.headers(endpoint.alice_key))

    # Then it is an event stream that opens before the work, and ends with the result
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.text.startswith(": stream open")
    assert rpc_messages(response)[-1]["id"] == 4


def test_a_streaming_tool_in_the_modern_era_opens_its_stream_before_the_work(endpoint):
    # Given a call of a tool that streams progress, in the 2026-07-28 era, with a progress token
    body = analysis_call()
    body["params"]["_meta"] = {**MODERN_META, "progressToken": "p-2"}
    headers = endpoint.headers(endpoint.alice_key)
    headers.update({"mcp-protocol-version": MODERN, "mcp-method": "tools/call", "mcp-name": "analyze_dataset"})

    # When it is posted
    response = httpx.post(endpoint.url, json=body, headers=headers, timeout=30)

    # Then the answer is an event stream: progress first, the result last
    assert response.headers["content-type"].startswith("text/event-stream")
    messages = rpc_messages(response)
    assert messages[0]["method"] == "notifications/progress"
    assert messages[-1]["id"] == body["id"]


def test_streamed_responses_are_proxy_safe_and_open_with_an_event(endpoint):
    response = httpx.post(endpoint.url, json=analysis_call(), headers=endpoint.headers(endpoint.alice_key))

    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.headers["cache-control"] == "no-cache"
    assert response.headers["x-accel-buffering"] == "no"
    assert response.text.startswith(": stream open")


def test_a_slow_tool_gets_keepalives_and_a_raising_tool_still_closes_its_stream(endpoint_factory, monkeypatch):
    # Given an endpoint started with an analysis that works in silence for several keepalive periods, then raises
    # (the endpoint offers the tools of the table as it was at its start)
    from mcp_backend.tools import table as tool_table

    def silent_then_broken(request, context):
        time.sleep(float(TEST_KEEPALIVE_SECONDS) * 4)
        raise RuntimeError("secret-bearing internal detail")

    # The tool as declared (it streams its progress, so its answer is an event stream), but for what it runs
    broken = dataclasses.replace(tool_table.TOOLS["analyze_dataset"], run=silent_then_broken)
    monkeypatch.setitem(tool_table.TOOLS, "analyze_dataset", broken)
    endpoint = endpoint_factory()
    call = {
        "jsonrpc": "2.0",
        "id": 9,
        "method": "tools/call",
        "params": {
            "name": "analyze_dataset",
            "arguments": {"dataset_url": "s3://local-datasets/apikey%3Auser-alice/sales.csv"},
        },
    }

    # When it is called (the stream is read to its end, or the test times out)
    response = httpx.post(endpoint.url, json=call, headers=endpoint.headers(endpoint.alice_key), timeout=10)

    # Then keepalive comments filled the silence, and the stream ended with an error result, no detail
    assert response.text.count(": keepalive") >= 2
    final = sse_messages(response.text)[-1]
    assert final["id"] == 9
    assert final["result"]["isError"] is True
    assert "secret-bearing" not in response.text
    assert_safe(response)


def test_the_readiness_path_answers_without_auth(endpoint):
    response = httpx.get(endpoint.url.removesuffix("/mcp") + "/healthz")

    assert response.status_code == 200


def test_log_lines_carry_the_correlation_id_and_never_the_key(endpoint):
    # Given the app's JSON log lines also written to a buffer (the handler's stream is fixed at import)
    from mcp_backend.observability import logger

    buffer = io.StringIO()
    handler = logging.StreamHandler(buffer)
    handler.setFormatter(logger.registered_formatter)
    logger.addHandler(handler)
    try:
        # When a request carries a correlation id
        headers = endpoint.headers(endpoint.alice_key, **{"x-correlation-id": "corr-e2e-123"})
        response = httpx.post(endpoint.url, json=LIST_TOOLS, headers=headers)
        # (the request line is logged as the response completes, on the server thread)
        deadline = time.monotonic() + 5
        while '"mcp request"' not in buffer.getvalue() and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        logger.removeHandler(handler)

    # Then the response and the request's log line carry it, and no line carries the API key
    out = buffer.getvalue()
    assert response.headers["x-correlation-id"] == "corr-e2e-123"
    request_lines = [json.loads(line) for line in out.splitlines() if '"mcp request"' in line]
    assert [line["correlation_id"] for line in request_lines] == ["corr-e2e-123"], out
    assert request_lines[0]["status"] == 200
    assert endpoint.alice_key not in out
    assert endpoint.alice_key.removeprefix("mcpk_")[:12] not in out


def call_tool(endpoint, version: str, name: str, arguments: object) -> httpx.Response:
    """One tools/call spoken in `version` (a 2026-07-28 request carries its version in _meta and headers)."""
    params: dict = {"name": name, "arguments": arguments}
    headers = endpoint.headers(endpoint.alice_key, **{"mcp-protocol-version": version})
    if version == MODERN:
        params["_meta"] = MODERN_META
        headers.update({"mcp-method": "tools/call", "mcp-name": name})
    return httpx.post(
        endpoint.url, json={"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": params}, headers=headers
    )


# Each era's "Error Handling" section of server/tools: 2025-06-18 lists invalid arguments among the protocol errors;
# 2025-11-25 (SEP-1303) and 2026-07-28 make input validation errors tool execution errors (isError: true), so the
# model can correct itself, and keep only malformed requests (that fail the CallToolRequest schema) protocol errors.
@pytest.mark.parametrize(
    ("version", "reported_as"),
    [("2025-06-18", "protocol error"), ("2025-11-25", "tool execution error"), (MODERN, "tool execution error")],
)
def test_invalid_tool_arguments_are_reported_as_the_requests_era_specifies(endpoint, version, reported_as):
    # Given a submit_analysis call whose arguments are an object that fails the tool's inputSchema
    arguments = {"dataset_url": "ftp://example.com/data.csv", "unexpected": 1}

    # When it is sent in the era's protocol version
    response = call_tool(endpoint, version, "submit_analysis", arguments)

    # Then it is answered as that era's spec says, naming the fields and never their values; nothing is queued
    assert response.status_code == 200, response.text
    message = (sse_messages(response.text) or [response.json()])[-1]
    if reported_as == "protocol error":
        assert message["error"]["code"] == -32602
        text = message["error"]["message"]
    else:
        assert message["result"]["isError"] is True
        text = message["result"]["content"][0]["text"]
    assert "dataset_url" in text and "unexpected" in text and "ftp://" not in text
    assert endpoint.local.queue_depth("JobQueue") == 0


@pytest.mark.parametrize("version", ["2025-06-18", "2025-11-25", MODERN])
def test_arguments_that_are_not_an_object_are_a_protocol_error_in_every_era(endpoint, version):
    # A request that fails the CallToolRequest schema itself is malformed: a protocol error in every era.
    response = call_tool(endpoint, version, "get_job", ["job-1"])

    message = (sse_messages(response.text) or [response.json()])[-1]
    assert message["error"]["code"] == -32602
    assert_safe(response)
