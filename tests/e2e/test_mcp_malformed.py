"""Malformed MCP requests on the endpoint (uvicorn on loopback, the local stack's resources): each one gets
the right JSON-RPC / HTTP error, and none leaves an ERROR line or a traceback in the logs."""

from __future__ import annotations

import json
import logging

import httpx
import pytest

from tests.e2e.test_mcp_http import MODERN, MODERN_META, assert_safe, rpc_messages

ERAS = ["legacy", MODERN]


def rpc(endpoint, era: str, body: dict, **extra_headers: str) -> httpx.Response:
    """POST one JSON-RPC message in the given protocol era (the modern era's _meta and routing headers added)."""
    headers = endpoint.headers(endpoint.alice_key, **extra_headers)
    if era == MODERN:
        body = {**body, "params": {**body.get("params", {}), "_meta": MODERN_META}}
        headers.update({"mcp-protocol-version": MODERN, "mcp-method": body["method"]})
        name = body["params"].get("name")
        if isinstance(name, str):
            headers["mcp-name"] = name
    return httpx.post(endpoint.url, content=json.dumps(body).encode(), headers=headers, timeout=30)


def last_message(response: httpx.Response) -> dict:
    return rpc_messages(response)[-1]


def error_records(caplog) -> list[logging.LogRecord]:
    return [record for record in caplog.records if record.levelno >= logging.ERROR or record.exc_info]


@pytest.mark.parametrize("name", [["get_job"], {"tool": "get_job"}, 7, None])
def test_a_tool_name_that_is_not_a_string_is_a_32602_naming_the_field(endpoint, caplog, name):
    # Given a handshake-era tools/call whose params.name is a list, an object, a number or null
    call = {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": name, "arguments": {}}}

    # When it is sent
    response = rpc(endpoint, "legacy", call)

    # Then it is an invalid-params error that names the field, with no exception text, and nothing logged an error
    error = last_message(response)["error"]
    assert error["code"] == -32602, error
    assert "params.name" in error["message"]
    assert "unhashable" not in error["message"]
    assert_safe(response)
    assert error_records(caplog) == []


@pytest.mark.parametrize("name", [["get_job"], {"tool": "get_job"}, 7, None])
def test_a_modern_tool_name_that_is_not_a_string_fails_the_mcp_name_header_check(endpoint, caplog, name):
    # Given a 2026-07-28 tools/call whose params.name is not a string (no Mcp-Name header can carry it)
    call = {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": name, "arguments": {}}}

    # When it is sent
    response = rpc(endpoint, MODERN, call)

    # Then the SDK's header check refuses it as any mismatch (-32020), or, where header and body agree (no
    # header, null name), the call is an invalid-params error naming the field; nothing logged an error
    error = last_message(response)["error"]
    assert error["code"] in (-32020, -32602), error
    if error["code"] == -32602:
        assert "params.name" in error["message"]
    assert_safe(response)
    assert error_records(caplog) == []


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize(
    "params",
    [
        {"name": "get_job", "arguments": {"job_id": 12}},
        {"name": "get_job", "arguments": []},
        {"name": ["get_job"], "arguments": {}},
        {"name": "no_such_tool", "arguments": {}},
    ],
)
def test_an_invalid_tools_call_notification_is_accepted_and_dropped_without_an_error_log(endpoint, caplog, era, params):
    # Given a tools/call without an id (a notification: nobody waits for an answer) with invalid params
    notification = {"jsonrpc": "2.0", "method": "tools/call", "params": params}

    # When it is sent
    response = rpc(endpoint, era, notification)

    # Then it is accepted with 202 and no body, and at most a DEBUG line says it was dropped (levels as deployed)
    assert response.status_code == 202
    assert response.content == b""
    assert [r for r in caplog.records if r.levelno > logging.DEBUG and r.name.startswith("mcp.")] == []
    assert error_records(caplog) == []


@pytest.mark.parametrize("era", ERAS)
def test_two_authorization_headers_are_refused_as_ambiguous(endpoint, era):
    # Given a request carrying two bearer keys, one of them valid
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    headers = [(k, v) for k, v in endpoint.headers().items()]
    headers += [("authorization", "Bearer mcpk_someone-else"), ("authorization", f"Bearer {endpoint.alice_key}")]
    if era == MODERN:
        body["params"] = {"_meta": MODERN_META}
        headers += [("mcp-protocol-version", MODERN), ("mcp-method", "tools/list")]

    # When it is sent
    response = httpx.post(endpoint.url, content=json.dumps(body).encode(), headers=headers)

    # Then it is a 400 with a JSON-RPC error, whichever header comes last
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == -32600
    assert "Authorization" in error["message"]
    assert endpoint.alice_key not in response.text
    assert_safe(response)


MALFORMED_URLS = [
    ("https://[::1/mcp", "IPv6"),
    ("https://[zz]/mcp", "IPv6"),
    ("https://mcp.example.com:99999/mcp", "port"),
    ("https://mcp.example.com:abc/mcp", "port"),
    ("https://" + "a" * 64 + ".example.com/mcp", "63"),
]


@pytest.mark.parametrize("loopback_policy", [False, True])
@pytest.mark.parametrize(("url", "fault"), MALFORMED_URLS)
def test_register_endpoint_with_a_malformed_url_is_a_clear_tool_error_and_stores_nothing(
    endpoint_factory, caplog, loopback_policy, url, fault
):
    # Given the endpoint as deployed, or with the local stack's loopback policy
    endpoint = endpoint_factory(**({"PROBE_ALLOW_LOOPBACK_HOSTS": "true"} if loopback_policy else {}))
    url = url.replace("https://", "https://alice:s3cr3t@", 1)
    call = {
        "jsonrpc": "2.0",
        "id": 3,
        "method": "tools/call",
        "params": {"name": "register_endpoint", "arguments": {"url": url, "name": "broken"}},
    }

    # When a malformed URL is registered, then the caller lists their endpoints
    response = rpc(endpoint, "legacy", call)
    listed = rpc(
        endpoint,
        "legacy",
        {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "list_endpoints", "arguments": {}}},
    )

    # Then the tool error names the fault (never the credentials), nothing was stored, nothing logged an error
    result = last_message(response)["result"]
    assert result["isError"] is True
    text = result["content"][0]["text"]
    assert "UnsafeEndpointUrl: " in text and fault in text, text
    assert "s3cr3t" not in response.text
    assert last_message(listed)["result"]["structuredContent"]["endpoints"] == []
    assert error_records(caplog) == []


@pytest.mark.parametrize("loopback_policy", [False, True])
def test_analyze_dataset_with_an_overlong_host_label_is_a_clear_tool_error(endpoint_factory, caplog, loopback_policy):
    # Given the endpoint as deployed, or with the local stack's loopback policy (its plain-http path)
    endpoint = endpoint_factory(**({"DATASET_ALLOW_LOOPBACK_HOSTS": "true"} if loopback_policy else {}))
    scheme = "http" if loopback_policy else "https"
    call = {
        "jsonrpc": "2.0",
        "id": 6,
        "method": "tools/call",
        "params": {"name": "analyze_dataset", "arguments": {"dataset_url": f"{scheme}://{'b' * 64}.example/d.csv"}},
    }

    # When it is analysed
    response = rpc(endpoint, "legacy", call)

    # Then the tool error names the overlong label, and nothing logged an error
    result = last_message(response)["result"]
    assert result["isError"] is True
    text = result["content"][0]["text"]
    assert "UnsafeDatasetUrl: " in text and "63" in text, text
    assert_safe(response)
    assert error_records(caplog) == []


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("name", ["get_job", "no_such_prompt"])
def test_an_unknown_prompt_is_a_32602_without_an_error_log(endpoint, caplog, era, name):
    # Given a prompts/get naming a prompt the server does not have (it has none; a tool's name is not one)
    request = {"jsonrpc": "2.0", "id": 9, "method": "prompts/get", "params": {"name": name, "arguments": {}}}

    # When it is sent
    response = rpc(endpoint, era, request)

    # Then it is the spec's invalid-params error for an unknown prompt, not an internal error, and nothing
    # logged an error or a traceback
    error = last_message(response)["error"]
    assert error["code"] == -32602, error
    assert error["message"] == "Unknown prompt"
    assert_safe(response)
    assert error_records(caplog) == []
