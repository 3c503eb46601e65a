"""The local stack's MCP endpoint (McpServer's Function URL on loopback, as `make dev` serves it) fuzzed in
both protocol eras with requests generated from the JSON-RPC envelope and from the inputSchemas the endpoint
publishes in tools/list.

Whatever arrives: no 5xx, every error a valid JSON-RPC error object, no response that echoes the API key, and
no traceback or ERROR line in the logs. Bounded in count (MAX_EXAMPLES per era) with no per-example deadline.
Loopback only: a URL argument is never free text; its host is a loopback or private literal or malformed,
so nothing resolves a name or leaves the machine.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from devstack.__main__ import issue_dev_keys
from tests.e2e.test_mcp_http import MODERN, MODERN_META, rpc_messages

pytestmark = pytest.mark.e2e

MAX_EXAMPLES = 100  # per protocol era: about 20 s of requests each on the in-process runtime
KNOWN_METHODS = [
    "tools/call", "tools/list", "initialize", "ping", "server/discover", "notifications/initialized",
    "notifications/cancelled", "resources/list", "prompts/get", "completion/complete", "logging/setLevel",
]  # fmt: skip

json_leaves = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
json_values = st.recursive(
    json_leaves | st.text(max_size=24),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=12,
)
request_ids = st.integers(-(2**53), 2**53) | st.text(max_size=16) | st.none() | st.floats(allow_nan=False) | json_values

# Hosts that are refused or connected to without a DNS lookup: loopback, private and metadata literals,
# and malformed hosts the URL policy refuses before resolving.
safe_hosts = st.sampled_from(
    ["127.0.0.1", "[::1]", "10.0.0.1", "169.254.169.254", "[::ffff:10.0.0.1]", "[zz]", "[::1", "a" * 64 + ".x"]
)
safe_ports = st.sampled_from(["", ":0", ":1", ":80", ":4566", ":65535", ":99999", ":abc"])
safe_urls = st.builds(
    lambda scheme, userinfo, host, port, path: f"{scheme}{userinfo}{host}{port}/{path}",
    st.sampled_from(["https://", "http://", "ftp://", "s3://", "file://", ""]),
    st.sampled_from(["", "alice:s3cr3t@"]),
    safe_hosts,
    safe_ports,
    st.text(alphabet=st.characters(codec="ascii", exclude_characters="\r\n"), max_size=20),
) | st.sampled_from(["s3://local-datasets/apikey%3Auser-alice/sales.csv", "s3://no-such-bucket/x.csv", "", "not a url"])


def _has_url(value: Any) -> bool:
    """True when free text somewhere in `value` looks like a URL (it could make the stack resolve a name)."""
    if isinstance(value, str):
        return "://" in value or value.startswith("//")
    if isinstance(value, list):
        return any(_has_url(item) for item in value)
    if isinstance(value, dict):
        return any(_has_url(k) or _has_url(v) for k, v in value.items())
    return False


def _with_safe_urls(value: Any, draw: st.DrawFn) -> Any:
    """`value` with every `*url` field replaced by a safe URL (schema-valid strings would be free text)."""
    if isinstance(value, dict):
        return {
            k: draw(safe_urls) if k.endswith("url") and isinstance(v, str) else _with_safe_urls(v, draw)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_with_safe_urls(item, draw) for item in value]
    return value


def from_schema(schema: dict, root: dict | None = None) -> st.SearchStrategy[Any]:
    """Values valid for the JSON Schema constructs pydantic publishes (hypothesis-jsonschema, the library for
    this, does not run with the pinned hypothesis): $ref, anyOf, enum, objects, arrays, strings, integers."""
    root = root or schema
    if "$ref" in schema:
        return from_schema(root["$defs"][schema["$ref"].rsplit("/", 1)[-1]], root)
    if "anyOf" in schema:
        return st.one_of([from_schema(option, root) for option in schema["anyOf"]])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    kind = schema.get("type")
    if kind == "object":
        properties = schema.get("properties", {})
        required = set(schema.get("required", []))
        return st.fixed_dictionaries(
            {name: from_schema(sub, root) for name, sub in properties.items() if name in required},
            optional={name: from_schema(sub, root) for name, sub in properties.items() if name not in required},
        )
    if kind == "array":
        items = from_schema(schema.get("items", {}), root)
        return st.lists(items, min_size=schema.get("minItems", 0), max_size=min(schema.get("maxItems", 3), 3))
    if kind == "string":
        if "pattern" in schema:
            return st.from_regex(schema["pattern"], fullmatch=True).filter(
                lambda text: schema.get("minLength", 0) <= len(text) <= schema.get("maxLength", 10**6)
            )
        return st.text(min_size=schema.get("minLength", 0), max_size=min(schema.get("maxLength", 40), 40))
    if kind == "integer":
        return st.integers(schema.get("minimum"), schema.get("maximum"))
    if kind == "null":
        return st.none()
    return json_values


def tool_calls(tools: list[dict]) -> st.SearchStrategy[dict]:
    """tools/call requests: arguments valid for the tool's inputSchema, or any JSON value."""

    @st.composite
    def call(draw: st.DrawFn) -> dict:
        tool = draw(st.sampled_from(tools))
        arguments = draw(from_schema(tool["inputSchema"]) | json_values.filter(lambda v: not _has_url(v)))
        body: dict[str, Any] = {
            "jsonrpc": "2.0",
            "method": "tools/call",
            "params": {"name": tool["name"], "arguments": _with_safe_urls(arguments, draw)},
        }
        if draw(st.integers(0, 9)):  # now and then a notification: no id
            body["id"] = draw(request_ids)
        return body

    return call()


@st.composite
def envelopes(draw: st.DrawFn) -> dict:
    """JSON-RPC envelopes: any version, id, method and params, the known methods more often."""
    body: dict[str, Any] = {}
    if draw(st.booleans()) or draw(st.booleans()):
        body["jsonrpc"] = draw(st.sampled_from(["2.0", "2.0", "1.0", 2.0, None, ""]))
    if draw(st.booleans()) or draw(st.booleans()):
        body["id"] = draw(request_ids)
    body["method"] = draw(st.sampled_from(KNOWN_METHODS) | json_values)
    if draw(st.booleans()):
        name = draw(st.sampled_from(["get_job", "analyze_dataset", "nope"]) | json_values)
        body["params"] = {"name": name, "arguments": draw(json_values)}
    elif draw(st.booleans()):
        body["params"] = draw(json_values)
    return draw(st.just(body).filter(lambda b: not _has_url(b)))


def raw_bodies() -> st.SearchStrategy[bytes]:
    """Bodies that are not one JSON-RPC object: truncated, binary, a batch array, a bare value."""
    return (
        st.binary(max_size=48)
        | st.sampled_from([b"", b"{", b"[]", b"null", b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list"'])
        | st.lists(envelopes(), min_size=1, max_size=3).map(lambda batch: json.dumps(batch).encode())
    )


def posted(era: str, body: Any) -> tuple[bytes, dict[str, str]]:
    """The bytes and era headers of one POST; the modern era's _meta and routing headers where they fit."""
    headers: dict[str, str] = {}
    if isinstance(body, bytes):
        if era == MODERN:
            headers["mcp-protocol-version"] = MODERN
        return body, headers
    if era == MODERN:
        headers["mcp-protocol-version"] = MODERN
        params = body.get("params")
        if isinstance(params, dict):
            body = {**body, "params": {**params, "_meta": MODERN_META}}
        name = params.get("name") if isinstance(params, dict) else None
        for header, value in (("mcp-method", body.get("method")), ("mcp-name", name)):
            if isinstance(value, str) and value.isascii() and value.isprintable():
                headers[header] = value
    return json.dumps(body).encode(), headers


def assert_valid_error(message: dict) -> None:
    """A JSON-RPC 2.0 error object: jsonrpc, id, and an error with an integer code in the reserved range."""
    assert message.get("jsonrpc") == "2.0", message
    assert "id" in message and "result" not in message, message
    error = message["error"]
    assert isinstance(error, dict) and set(error) <= {"code", "message", "data"}, message
    assert type(error.get("code")) is int and -32768 <= error["code"] <= -32000, message
    assert isinstance(error.get("message"), str) and error["message"], message


def assert_clean(response: httpx.Response, key: str) -> None:
    assert response.status_code < 500, (response.status_code, response.text)
    assert key not in response.text
    assert "Traceback" not in response.text and 'File "' not in response.text, response.text
    if response.status_code == 202:
        assert response.content == b""
        return
    content_type = response.headers.get("content-type", "")
    assert content_type.startswith(("application/json", "text/event-stream")), (response.status_code, content_type)
    messages = rpc_messages(response)
    for message in messages:
        if isinstance(message, dict) and "error" in message:
            assert_valid_error(message)


def error_lines(caplog, output: str) -> list[str]:
    found = [f"{r.name}: {r.getMessage()}" for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    found += [line for line in output.splitlines() if "Traceback" in line or '"level":"ERROR"' in line]
    return found


@pytest.mark.parametrize("era", ["legacy", MODERN])
def test_generated_requests_get_clean_json_rpc_answers_and_leave_no_traceback(capsys, caplog, start_stack, era):
    # capsys first: it is torn down after the stack, whose Lambda runtime writes its output into it
    # Given the product stack as make dev starts it, its MCP endpoint and a dev key, and the published tools
    stack = start_stack()
    [key] = issue_dev_keys(stack).values()
    [web] = stack.web_functions.values()
    url = f"{web.url}/mcp"
    base = {
        "accept": "application/json, text/event-stream",
        "content-type": "application/json",
        "authorization": f"Bearer {key}",
    }
    # A bound, not a speed assertion: under the Lambda runtime on a loaded machine a request may wait for
    # another environment's cold start.
    with httpx.Client(timeout=90) as http:
        listing = http.post(url, json={"jsonrpc": "2.0", "id": 0, "method": "tools/list"}, headers=base)
        tools = rpc_messages(listing)[-1]["result"]["tools"]
        assert {tool["name"] for tool in tools} >= {"analyze_dataset", "register_endpoint", "submit_analysis"}

        @settings(
            max_examples=MAX_EXAMPLES,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        )
        @given(body=tool_calls(tools) | envelopes() | raw_bodies())
        def one_request(body: Any) -> None:
            content, era_headers = posted(era, body)
            # When it is posted
            response = http.post(url, content=content, headers={**base, **era_headers})
            # Then it is answered cleanly
            assert_clean(response, key)

        one_request()

    # And nothing in the logs is an error or a traceback
    captured = capsys.readouterr()
    output = captured.out + captured.err
    assert error_lines(caplog, output) == [], output[output.find("Traceback") - 500 :][:4000]
