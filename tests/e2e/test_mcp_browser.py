"""A browser client against the MCP endpoint: headless Chromium (DevTools protocol) loads a page from a loopback
origin and calls tools/list with fetch, so the browser itself sends the CORS preflight and enforces the answer."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.e2e.browser import Browser, LoopbackServer, started_browser

pytestmark = pytest.mark.e2e

# The page's script: tools/list with the key in Authorization (which makes the browser preflight), and the same
# call without a key, whose 401 challenge the page must be able to read.
PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>mcp browser client</title></head><body><script>
const mcpUrl = %(url)s, key = %(key)s;
async function call(authorization) {
  const headers = {"content-type": "application/json", "accept": "application/json, text/event-stream",
                   "mcp-protocol-version": "2025-11-25"};
  if (authorization) headers["authorization"] = authorization;
  try {
    const response = await fetch(mcpUrl, {method: "POST", headers,
      body: JSON.stringify({jsonrpc: "2.0", id: 1, method: "tools/list"})});
    return {status: response.status, body: await response.text(),
            challenge: response.headers.get("www-authenticate")};
  } catch (error) {
    return {refused: String(error)};
  }
}
window.outcome = Promise.all([call("Bearer " + key), call(null)]);
</script></body></html>"""


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with started_browser() as running:
        yield running


class PageServer(LoopbackServer):
    """One HTML page (its `body`) on its own loopback origin."""

    def __init__(self) -> None:
        self.body = b""
        super().__init__(lambda _: (self.body, "text/html; charset=utf-8"))


@pytest.fixture
def pages() -> Iterator[tuple[PageServer, PageServer]]:
    allowed, other = PageServer(), PageServer()
    yield allowed, other
    allowed.close()
    other.close()


def outcome_on(browser: Browser, page: PageServer, url: str, key: str) -> list[dict]:
    page.body = (PAGE % {"url": json.dumps(url), "key": json.dumps(key)}).encode()
    session = browser.open(page.origin + "/")
    return browser.evaluate(session, "window.outcome")


def tools_of(body: str) -> list[str]:
    """The listed tool names, whichever form the endpoint answered in: one JSON body (tools/list is ready at
    once) or an event stream."""
    if body.lstrip().startswith("{"):
        messages = [json.loads(body)]
    else:
        messages = [json.loads(line[len("data: ") :]) for line in body.splitlines() if line.startswith("data: ")]
    return [tool["name"] for tool in messages[-1]["result"]["tools"]]


def test_a_page_on_an_allowed_origin_lists_the_tools_and_a_page_on_another_origin_is_refused(
    browser, pages, endpoint_factory
):
    # Given the endpoint allowing the first page's loopback origin only
    allowed, other = pages
    endpoint = endpoint_factory(MCP_ALLOWED_ORIGINS=allowed.origin)

    # When each page calls tools/list with fetch (the browser preflights it), with and without a key
    listed, challenged = outcome_on(browser, allowed, endpoint.url, endpoint.alice_key)
    refused = outcome_on(browser, other, endpoint.url, endpoint.alice_key)

    # Then the allowed page reads the tool list, and the 401's challenge
    assert listed["status"] == 200 and "submit_analysis" in tools_of(listed["body"])
    assert challenged["status"] == 401 and challenged["challenge"].startswith("Bearer")
    # And the other page's browser refuses both calls: the script never sees an answer
    assert [set(result) for result in refused] == [{"refused"}, {"refused"}]
