"""The per-request controls off the request path's DynamoDB: the calls-in-flight slot of a tool that reaches the
network, and the OAuth token check, each measured with DynamoDB answering after an AWS-like 5 ms and at once.

The endpoint (`create_app`) is served by uvicorn in this process on loopback; its DynamoDB is a stand-in that
answers every request after a set latency and accepts every write (`_LatentDynamoDB`), so what a control costs
on the path shows as the latency it adds. A call of `analyze_dataset` reads a 6-row CSV from a loopback server.
Rounds alternate the two latencies; the figure is the mean of every call's wall time.
"""

from __future__ import annotations

import asyncio
import http.server
import json
import statistics
import sys
import threading
import time
from collections import Counter
from typing import Any

from tests.bench.load import _connection
from tests.bench.measure import RESULTS

CALLS_PER_ROUND = 40
ROUNDS = 5
AWS_LIKE_SECONDS = 0.005  # DynamoDB's single-digit milliseconds
CSV = b"id,score\n1,3\n2,5\n3,8\n4,1\n5,9\n6,2\n"


class _LatentDynamoDB:
    """DynamoDB answering after `latency` seconds: writes succeed, no job exists. Counts the call slots' writes by
    kind: a take (before the call runs), an extension (off the path) and a give-back (after the answer)."""

    def __init__(self) -> None:
        self.latency = 0.0
        self.slot_writes: Counter[str] = Counter()
        self.reads = 0
        self._lock = threading.Lock()

    def update_item(self, **request: Any) -> dict[str, Any]:
        expression = request["UpdateExpression"]
        if request["Key"]["id"]["S"].startswith("inflight#"):
            kind = "take" if "holder" in expression else "give-back" if ":linger" in expression else "extension"
            with self._lock:
                self.slot_writes[kind] += 1
        time.sleep(self.latency)
        return {}

    def get_item(self, **request: Any) -> dict[str, Any]:
        with self._lock:
            self.reads += 1
        time.sleep(self.latency)
        return {}


class _NoKinesis:
    def put_records(self, StreamName: str, Records: list[dict[str, Any]]) -> dict[str, Any]:
        return {"FailedRecordCount": 0, "Records": [{"SequenceNumber": "1", "ShardId": "s"} for _ in Records]}


class _Csv(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/csv")
        self.send_header("content-length", str(len(CSV)))
        self.end_headers()
        self.wfile.write(CSV)

    def log_message(self, *args: object) -> None:
        return None


def run() -> list[str]:
    from mcp_backend.jwks import JwksCache
    from mcp_backend.mcp.oauth import OAuthAuthenticator
    from mcp_backend.mcp.server import create_app
    from tests.e2e.conftest import serve
    from tests.unit.endpoint_fakes import SETTINGS, EveryoneIsAlice
    from tests.unit.test_oauth import EC_KEY, ISSUER, RESOURCE, StubIssuer, jwk, policy, token

    dataset = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Csv)
    threading.Thread(target=dataset.serve_forever, daemon=True).start()
    dataset_url = f"http://127.0.0.1:{dataset.server_address[1]}/six.csv"
    settings = SETTINGS.model_copy(
        update={
            "oauth_resource": RESOURCE,
            "dataset_allow_loopback_hosts": True,
            "limit_free_requests_per_minute": 10**6,  # the limiter still leases (blocks of 50), never refuses
            "mcp_allowed_hosts": "127.0.0.1:*",
        }
    )
    dynamodb, kinesis = _LatentDynamoDB(), _NoKinesis()
    issuer = StubIssuer(jwk(EC_KEY, "k1", "ES256"))
    oauth = OAuthAuthenticator(policy(tier_claim="tier"), JwksCache(ISSUER, f"{ISSUER}jwks", issuer))
    apps = {
        name: create_app(
            settings, authenticator=authenticator, client_factory=lambda s: kinesis if s == "kinesis" else dynamodb
        )
        for name, authenticator in {"oauth": oauth, "trusted": EveryoneIsAlice()}.items()
    }
    servers = {name: serve(app) for name, app in apps.items()}
    # Server and client share this interpreter: a short switch interval, so a thread waiting for the GIL does not
    # add up to 5 ms (the default) to each step of a request.
    switch_interval = sys.getswitchinterval()
    sys.setswitchinterval(0.0002)
    bearer = token(EC_KEY, alg="ES256", tier="free", exp=int(time.time()) + 3600)
    try:
        analysis = _timed(servers["oauth"][2], bearer, "analyze_dataset", {"dataset_url": dataset_url}, dynamodb)
        slot_writes = dynamodb.slot_writes.copy()
        get_job = _timed(servers["oauth"][2], bearer, "get_job", {"job_id": "0" * 32}, dynamodb)
        trusted = _timed(servers["trusted"][2], bearer, "get_job", {"job_id": "0" * 32}, dynamodb)
    finally:
        sys.setswitchinterval(switch_interval)
        for server, thread, _ in servers.values():
            server.should_exit = True
            thread.join(timeout=10)
        dataset.shutdown()
    calls = 2 * ROUNDS * CALLS_PER_ROUND
    per_call = {kind: count / calls for kind, count in slot_writes.items()}
    RESULTS["request_path_controls"] = {
        "network_call_ms": analysis,
        "get_job_oauth_ms": get_job,
        "get_job_trusted_ms": trusted,
        "slot_writes_per_call": per_call,
    }
    return [
        "## Per-request controls off the request path's DynamoDB",
        "",
        "The endpoint (`create_app`, uvicorn in this process on loopback) over a DynamoDB stand-in that answers "
        f"every request after {AWS_LIKE_SECONDS * 1000:.0f} ms (AWS-like) or at once, accepting every write; "
        f"{ROUNDS} rounds of {CALLS_PER_ROUND} sequential calls per latency, alternated; mean wall time per call "
        "(a call's time here moves in steps of about 4 ms, in server and client alike: a mean of 200 resolves "
        "less than a step). "
        "A free-tier caller with an ES256 access token (as the stack's own authorization server signs them). "
        "If a control made a DynamoDB request before the answer, the 5 ms column would be at least 5 ms longer.",
        "",
        "| measure | DynamoDB at 5 ms | DynamoDB at once | difference |",
        "|---|---|---|---|",
        _row("`analyze_dataset` (6-row CSV on loopback): calls-in-flight slot kept by the instance", analysis),
        _row("`get_job` with an ES256 access token (the job's own read is one request)", get_job),
        _row("`get_job`, the caller taken as given (no token check)", trusted),
        "",
        "Call-slot writes per `analyze_dataset` call: "
        + ", ".join(f"{kind} {per_call.get(kind, 0):.3f}" for kind in ("take", "extension", "give-back"))
        + " (a take is the only one before the call runs: the first call's; the extension runs on a background "
        "thread while the call runs, the give-back after the answer). The token check reads no table: its cost "
        "is the signature check, the OAuth row against the one without a check.",
    ]


def _row(what: str, figures: dict[str, float]) -> str:
    slow, fast = figures["aws_like"], figures["at_once"]
    return f"| {what} | {slow:.2f} ms | {fast:.2f} ms | {slow - fast:+.2f} ms |"


def _timed(port: int, bearer: str, tool: str, arguments: dict[str, Any], dynamodb: _LatentDynamoDB) -> dict[str, float]:
    """Mean wall time of a call, in ms, with DynamoDB at the AWS-like latency and at once, rounds alternated; the
    load client's keep-alive h11 connection (tests.bench.load), which sends each request in one write."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}
    headers = {
        "authorization": f"Bearer {bearer}",
        "accept": "application/json, text/event-stream",
        "content-type": "application/json",
    }
    url, payload = f"http://127.0.0.1:{port}/mcp", json.dumps(body).encode()
    asyncio.run(_connection(url, headers, payload, 5, []))  # warm: keys fetched, the first lease and slot taken
    dynamodb.slot_writes.clear()
    samples: dict[str, list[float]] = {"aws_like": [], "at_once": []}
    for _ in range(ROUNDS):
        for name, latency in (("aws_like", AWS_LIKE_SECONDS), ("at_once", 0.0)):
            dynamodb.latency = latency
            asyncio.run(_connection(url, headers, payload, CALLS_PER_ROUND, samples[name]))
    return {name: statistics.fmean(values) * 1000 for name, values in samples.items()}
