"""Fair share on the endpoint: one tenant's slow calls cannot hold the endpoint. A principal runs at most its tier's
calls that reach the network at once (429 with Retry-After past it), every synchronous fetch ends by its deadline
with a tool error naming it, and meanwhile another tenant's calls are answered."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from devstack.wired_stack import local_dataset_url
from tests.e2e.conftest import Endpoint

pytestmark = pytest.mark.e2e

FREE_CALLS_IN_FLIGHT = 2


class SlowDataset(http.server.BaseHTTPRequestHandler):
    """A CSV that trickles one row every 0.2 s until the test lets it end: a dataset slow enough to hold a call."""

    started: threading.Semaphore
    release: threading.Event

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/csv")
        self.end_headers()
        self.wfile.write(b"id,score\n")
        self.wfile.flush()
        self.started.release()
        row = 0
        while not self.release.wait(0.2):
            row += 1
            try:
                self.wfile.write(f"{row},{row % 7}\n".encode())
                self.wfile.flush()
            except OSError:
                return  # the fetcher stopped reading: the call ended

    def log_message(self, *args: object) -> None:
        return None


@pytest.fixture
def slow_dataset() -> Iterator[tuple[str, threading.Semaphore, threading.Event]]:
    handler = type("Handler", (SlowDataset,), {"started": threading.Semaphore(0), "release": threading.Event()})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/slow.csv", handler.started, handler.release
    finally:
        handler.release.set()
        server.shutdown()


def call(endpoint: Endpoint, key: str, name: str, arguments: dict) -> httpx.Response:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name, "arguments": arguments}}
    return httpx.post(endpoint.url, json=body, headers=endpoint.headers(key), timeout=60)


def result_of(response: httpx.Response) -> dict:
    """The call's JSON-RPC result, from a JSON answer or the last event of a stream."""
    if response.headers["content-type"].startswith("application/json"):
        return response.json()["result"]
    events = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: ")]
    return next(event for event in reversed(events) if event.get("id") == 1)["result"]


def test_a_tenant_at_its_cap_of_slow_calls_is_refused_and_another_tenant_is_served(endpoint_factory, slow_dataset):
    # Given a free-tier tenant (bob) running as many slow synchronous analyses as its tier allows
    endpoint = endpoint_factory(DATASET_ALLOW_LOOPBACK_HOSTS="true")
    url, started, release = slow_dataset
    with ThreadPoolExecutor(FREE_CALLS_IN_FLIGHT) as pool:
        slow = [
            pool.submit(call, endpoint, endpoint.bob_key, "analyze_dataset", {"dataset_url": url})
            for _ in range(FREE_CALLS_IN_FLIGHT)
        ]
        for _ in range(FREE_CALLS_IN_FLIGHT):
            assert started.acquire(timeout=30), "the slow calls did not start"

        # When bob starts one more, and alice (another tenant) calls while bob's calls still run
        refused = call(endpoint, endpoint.bob_key, "analyze_dataset", {"dataset_url": url})
        alices_listing = call(endpoint, endpoint.alice_key, "list_failed_jobs", {})
        alices_sales = local_dataset_url("apikey:user-alice", "sales.csv")
        alices_analysis = call(endpoint, endpoint.alice_key, "analyze_dataset", {"dataset_url": alices_sales})
        still_running = [not future.done() for future in slow]
        release.set()
        finished = [future.result(timeout=60) for future in slow]

    # Then bob's extra call is a 429 naming the limit and tier, with Retry-After
    assert refused.status_code == 429
    assert "calls_in_flight limit of 2 for tier free" in refused.json()["error"]["message"]
    assert int(refused.headers["retry-after"]) > 0
    # And alice's calls were answered while bob's were still running
    assert all(still_running)
    assert alices_listing.status_code == 200 and result_of(alices_listing)["structuredContent"] == {"failedJobs": []}
    assert result_of(alices_analysis)["structuredContent"]["rowCount"] == 6
    # And bob's slow calls completed and gave their slots back: his next call is admitted
    assert all(response.status_code == 200 for response in finished)
    assert call(endpoint, endpoint.bob_key, "list_failed_jobs", {}).status_code == 200


def test_a_synchronous_fetch_ends_at_its_deadline_with_a_tool_error_naming_it(endpoint_factory, slow_dataset):
    # Given an endpoint whose synchronous calls have a 1 s deadline, and a dataset that never ends
    endpoint = endpoint_factory(DATASET_ALLOW_LOOPBACK_HOSTS="true", SYNC_CALL_DEADLINE_SECONDS="1")
    url, _started, _release = slow_dataset

    # When a tenant analyses it synchronously
    response = call(endpoint, endpoint.bob_key, "analyze_dataset", {"dataset_url": url})

    # Then the call ends as a tool error naming the deadline and the job alternative, not as a timeout
    result = result_of(response)
    assert result["isError"] is True
    text = result["content"][0]["text"]
    assert "CallDeadlineExceeded" in text and "1 s deadline" in text and "submit_analysis" in text
