"""McpServer: time to first byte of a streamed tool call against its total time, cold import of the app
module against the stock SDK app's (loopback only, bounded loops). Requests per second: tests.bench.endpoint."""

from __future__ import annotations

import json
import os
import statistics
import time

import boto3
import httpx
from moto import mock_aws

from devstack.runtime.interpreter import RUNTIME_VERSION
from tests.bench.measure import RESULTS, ROOT, DeployedPython, paired_ratio, paired_runs, timed_in_new_interpreter
from tests.unit.test_request_cost import adversarial_body, benign_body, cost

# The load is far above a tier's rate: the limiter still counts every request, it never refuses one.
UNTHROTTLED = "1000000"
RUNS = 9
STREAM_CALLS = 5
DATASET_ROWS = 200_000
APP_BUILD = "import mcp_backend.mcp.server as m\nm.create_app()"
STOCK_APP_BUILD = "import tests.bench.stock_app as s\ns.create_app()"


def run() -> list[str]:
    with mock_aws():
        from devstack.wired_stack import DATASET_BUCKET, LocalEnvironment
        from tests.e2e.conftest import mcp_environment, serve

        local = LocalEnvironment(boto3.client)
        local.seed_datasets()
        spec = local.stack.function("McpServer")
        environment = mcp_environment(local, SSE_KEEPALIVE_SECONDS="15", LIMIT_PRO_REQUESTS_PER_MINUTE=UNTHROTTLED)
        os.environ.update(environment)

        from mcp_backend.api_keys import add_api_key
        from mcp_backend.config import McpSettings
        from mcp_backend.mcp.server import create_app

        rows = "\n".join(f"{i},{i % 97},{'ab'[i % 2]}" for i in range(DATASET_ROWS))
        body = f"id,score,kind\n{rows}\n"
        boto3.client("s3").put_object(Bucket=DATASET_BUCKET, Key="apikey%3Abench-user/bench.csv", Body=body)
        key = add_api_key(boto3.client("secretsmanager"), environment["API_KEYS_SECRET_ID"], "bench-user", "pro")
        server, thread, port = serve(create_app(McpSettings.model_validate(environment)))
        url = f"http://127.0.0.1:{port}/mcp"
        headers = {
            "authorization": f"Bearer {key}",
            "accept": "application/json, text/event-stream",
            "content-type": "application/json",
        }
        try:
            with httpx.Client(timeout=60) as client:
                ttfb, total, events = _streamed_calls(client, url, headers)
        finally:
            server.should_exit = True
            thread.join(timeout=10)

    # Both in the deploy's runtime with the built layers (.pyc precompiled), alternating runs.
    deployed = DeployedPython.prepare(local.stack.template)
    layer_ids = deployed.layer_ids(spec.layer_refs)
    variables = {name: environment[name] for name in spec.environment}
    app_env = deployed.environment(deployed.build_dir / spec.logical_id, layer_ids, **variables, AWS_REGION="us-east-1")
    stock_env = deployed.environment(ROOT, layer_ids)
    runs = paired_runs(
        lambda: timed_in_new_interpreter(deployed.python, APP_BUILD, app_env),
        lambda: timed_in_new_interpreter(deployed.python, STOCK_APP_BUILD, stock_env),
        RUNS,
    )
    cold_import = statistics.median(ours for ours, _ in runs)
    stock_import = statistics.median(stock for _, stock in runs)
    cold_ratio = paired_ratio(runs)
    # The guard's one scan of a body (the nesting pre-scan) on the largest body served: a hostile body against
    # a benign batch of the same size.
    cap = int(environment.get("MCP_MAX_BODY_BYTES", 256 * 1024))
    hostile_scan, benign_scan = cost(adversarial_body(cap)), cost(benign_body(cap))
    RESULTS["mcp_server_request_cost"] = {
        "body_bytes": cap,
        "hostile_ms": hostile_scan * 1000,
        "benign_ms": benign_scan * 1000,
        "ratio": hostile_scan / benign_scan,
    }
    RESULTS["mcp_server"] = {
        "first_byte_ms": ttfb * 1000,
        "streamed_call_ms": total * 1000,
        "cold_import_ms": cold_import * 1000,
        "stock_app_import_ms": stock_import * 1000,
        "cold_import_ratio": cold_ratio,
    }

    return [
        "## McpServer",
        "",
        f"uvicorn (one worker) on 127.0.0.1, the app from `create_app()` with the McpServer template environment, "
        f"moto in-process. Streamed call: `analyze_dataset` with a progress token on a {DATASET_ROWS:,}-row CSV in "
        f"moto S3, {STREAM_CALLS} calls; cold import: {RUNS} fresh interpreters of the deploy's runtime "
        f"(python{RUNTIME_VERSION}) each, in pairs (which runs first swapped every pair), with the built layers on "
        "the path (.pyc precompiled for that runtime; the stock app imports the same SDK from them); the ratio is "
        "the median of the pairs' ratios.",
        "",
        "| measure | value | baseline | ratio |",
        "|---|---|---|---|",
        f"| time to first byte, streamed tool call | {ttfb * 1000:.1f} ms | total time of the call "
        f"{total * 1000:.0f} ms | {ttfb / total:.3f} |",
        f"| SSE events per streamed call (comment + progress + result) | {events} | | |",
        f"| guard's nesting pre-scan, hostile {cap // 1024} KiB body (unclosed escaped quotes, then brackets) | "
        f"{hostile_scan * 1000:.2f} ms | a benign batch call of the same size {benign_scan * 1000:.2f} ms | "
        f"{hostile_scan / benign_scan:.2f}x |",
        f"| cold import + `create_app()` of `mcp_backend.mcp.server` | {cold_import * 1000:.0f} ms | "
        f"the stock SDK app's import + build (`tests/bench/stock_app.py`) {stock_import * 1000:.0f} ms "
        f"| {cold_ratio:.2f}x |",
        "",
        "This server runs in the bench's own process beside the client (one interpreter, one GIL), so its "
        "latencies include the client's work: requests per second are measured in the next section, where "
        "server and client are separate processes.",
        "",
        "The first byte is the guard's `: stream open` comment plus the headers, written before the tool starts "
        "its download, so a client (or the Lambda Web Adapter) sees the stream at once however long the work "
        "takes. On Lambda add the adapter's hop and the Function URL; the 20 MB stream cap is never approached: "
        "results larger than `JOB_RESULT_PAGE_BYTES` are paged by `get_job`.",
        "",
    ]


def _streamed_calls(client: httpx.Client, url: str, headers: dict[str, str]) -> tuple[float, float, int]:
    first_bytes, totals, events = [], [], 0
    for call in range(STREAM_CALLS):
        body = {
            "jsonrpc": "2.0",
            "id": call,
            "method": "tools/call",
            "params": {
                "name": "analyze_dataset",
                "arguments": {"dataset_url": "s3://local-datasets/apikey%3Abench-user/bench.csv"},
                "_meta": {"progressToken": f"bench-{call}"},
            },
        }
        started = time.perf_counter()
        first = None
        text = ""
        with client.stream("POST", url, json=body, headers=headers) as response:
            for chunk in response.iter_text():
                if first is None:
                    first = time.perf_counter() - started
                text += chunk
        totals.append(time.perf_counter() - started)
        first_bytes.append(first or 0.0)
        result = json.loads([line for line in text.splitlines() if line.startswith("data: ")][-1][6:])
        assert result.get("result", {}).get("structuredContent", {}).get("rowCount") == DATASET_ROWS, result
        events = text.count("\r\n\r\n")
    return statistics.median(first_bytes), statistics.median(totals), events
