"""CORS on the MCP endpoint: a browser on an allowed origin gets its preflight answered and may read the
headers an MCP client needs; any other origin gets nothing a browser would accept."""

from __future__ import annotations

import httpx
import pytest

from tests.e2e.conftest import ALLOWED_ORIGIN

LIST_TOOLS = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
REQUESTED_HEADERS = "authorization, content-type, mcp-protocol-version, mcp-method, mcp-name, mcp-param-region"


def preflight(url: str, origin: str, method: str = "POST", headers: str = REQUESTED_HEADERS) -> httpx.Response:
    return httpx.options(
        url,
        headers={"origin": origin, "access-control-request-method": method, "access-control-request-headers": headers},
    )


def listed(value: str | None) -> set[str]:
    return {part.strip().lower() for part in (value or "").split(",") if part.strip()}


def test_a_preflight_from_an_allowed_origin_allows_post_and_the_mcp_headers(endpoint):
    # When a browser on the allowed origin asks before a tools/list with the MCP headers
    response = preflight(endpoint.url, ALLOWED_ORIGIN)

    # Then the endpoint answers without credentials, allowing POST and every header asked for
    assert response.status_code == 204
    assert response.headers["access-control-allow-origin"] == ALLOWED_ORIGIN
    assert "post" in listed(response.headers.get("access-control-allow-methods"))
    assert listed(response.headers.get("access-control-allow-headers")) == listed(REQUESTED_HEADERS)
    assert "origin" in listed(response.headers.get("vary"))


def test_a_preflight_asking_for_an_unknown_header_does_not_get_it_allowed(endpoint):
    response = preflight(endpoint.url, ALLOWED_ORIGIN, headers="authorization, x-something-else")

    assert response.status_code == 204
    assert listed(response.headers.get("access-control-allow-headers")) == {"authorization"}


@pytest.mark.parametrize("origin", ["https://evil.example", "http://127.0.0.1:1"])
def test_a_preflight_from_any_other_origin_gets_no_cors_headers(endpoint, origin):
    response = preflight(endpoint.url, origin)

    assert response.status_code == 403
    assert not [name for name in response.headers if name.lower().startswith("access-control-")]


def test_a_response_to_an_allowed_origin_exposes_what_an_mcp_client_reads(endpoint):
    # When the allowed origin calls tools/list, and calls without a key
    listed_tools = httpx.post(
        endpoint.url, json=LIST_TOOLS, headers=endpoint.headers(endpoint.alice_key, origin=ALLOWED_ORIGIN)
    )
    refused = httpx.post(endpoint.url, json=LIST_TOOLS, headers=endpoint.headers(None, origin=ALLOWED_ORIGIN))

    # Then both answers may be read by the page, and the challenge and protocol version are exposed to it
    for response in (listed_tools, refused):
        assert response.headers["access-control-allow-origin"] == ALLOWED_ORIGIN
        exposed = listed(response.headers.get("access-control-expose-headers"))
        assert {"www-authenticate", "mcp-protocol-version"} <= exposed
    assert listed_tools.status_code == 200 and refused.status_code == 401


def test_a_request_without_an_origin_gets_no_cors_headers(endpoint):
    response = httpx.post(endpoint.url, json=LIST_TOOLS, headers=endpoint.headers(endpoint.alice_key))

    assert response.status_code == 200
    assert not [name for name in response.headers if name.lower().startswith("access-control-")]


def test_an_options_request_that_is_not_a_preflight_is_still_405(endpoint):
    response = httpx.options(endpoint.url, headers={"origin": ALLOWED_ORIGIN})

    assert response.status_code == 405


def test_a_page_served_by_the_endpoint_itself_may_call_it(endpoint):
    # Given a page on the endpoint's own origin (same scheme, host and port: a same-origin request, no CORS involved)
    own_origin = str(httpx.URL(endpoint.url).copy_with(path="/"))[:-1]

    # When it calls tools/list
    response = httpx.post(
        endpoint.url, json=LIST_TOOLS, headers=endpoint.headers(endpoint.alice_key, origin=own_origin)
    )

    # Then it is served
    assert response.status_code == 200


def test_a_rebound_name_is_refused_even_when_host_and_origin_agree(endpoint):
    # Given a hostile page whose name was rebound to the endpoint's address: its Host and Origin agree, on its name
    headers = endpoint.headers(endpoint.alice_key, origin="http://evil.example.com")
    headers["host"] = "evil.example.com"

    # When it calls tools/list
    response = httpx.post(endpoint.url, json=LIST_TOOLS, headers=headers)

    # Then the host is not one of the endpoint's, and nothing is served
    assert response.status_code in (403, 421)
    assert "result" not in response.text
