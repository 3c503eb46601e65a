"""What tracing costs the MCP endpoint: cold start and server CPU per request with Tracing=off and on, against the
stock SDK app (`python -m tests.bench tracing`).

Each server is what deploys, started as the endpoint section starts it (tests.bench.endpoint.DeployedServers: run.sh
on the deploy's runtime with the built code and layers; the MCP layer ships the OpenTelemetry SDK), its AWS calls
going to the endpoint section's AWS stand-in in front of a moto server; with tracing on it samples every request
(the worst case: every span recorded and exported) and exports to an OTLP/HTTP receiver on loopback in the bench
process, which counts what arrives. Servers are pinned to one core, the load client, the stand-in and moto to the
other.
"""

from __future__ import annotations

import http.server
import statistics
import subprocess
from typing import Any, ClassVar

import boto3

from devstack.runtime.procfs import cpu_seconds
from tests.bench.endpoint import (
    HEADERS,
    LIST,
    UNKNOWN_JOB,
    UNTHROTTLED,
    DeployedServers,
    _run_load,
    call,
    cores,
    moto_server,
    start_aws_stand_in,
)
from tests.bench.measure import RESULTS, paired_ratio, paired_ratio_quartiles, paired_runs, timed_in_new_interpreter
from tests.e2e.conftest import mcp_environment
from tests.loopback_http import answer_empty, serving

REQUESTS = 300  # sequential, on one keep-alive connection: how Lambda runs the endpoint
ROUNDS = 12
COLD_PAIRS = 9
TEMPLATE_SAMPLE_RATE = 0.05  # the TracingSampleRate parameter's default
APP_BUILD = "import mcp_backend.mcp.server as m\nm.create_app()"
STOCK_BUILD = "import stock_app as s\ns.create_app()"


class _Receiver(http.server.BaseHTTPRequestHandler):
    """The collector's OTLP/HTTP receiver, stood in for: accepts every export, counts requests and spans."""

    exports: ClassVar[int] = 0
    spans: ClassVar[int] = 0

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["content-length"]))
        _Receiver.exports += 1
        _Receiver.spans += body.count(b'"spanId"')
        answer_empty(self)

    def log_message(self, *args: object) -> None:
        pass


def run() -> list[str]:
    server_cpus, client_cpus = cores()
    with moto_server(client_cpus) as (moto_url, processes), serving(_Receiver) as receiver:
        figures = _measure(moto_url, f"{receiver}/v1/traces", server_cpus, client_cpus, processes)
    RESULTS["tracing"] = figures
    return _section(figures)


def _at_default_rate(on: dict[str, str]) -> dict[str, str]:
    """Tracing on at the template's TracingSampleRate (requests bring no sampled parent)."""
    return {**on, "TRACING_SAMPLE_RATE": str(TEMPLATE_SAMPLE_RATE)}


def _measure(
    moto_url: str, receiver: str, server_cpus: set[int], client_cpus: set[int], processes: list[subprocess.Popen]
) -> dict[str, Any]:
    from devstack.wired_stack import LocalEnvironment
    from mcp_backend.api_keys import add_api_key

    def client(service: str) -> Any:
        return boto3.client(service, endpoint_url=moto_url, region_name="us-east-1")

    local = LocalEnvironment(client)
    environment = mcp_environment(local, SSE_KEEPALIVE_SECONDS="15", LIMIT_PRO_REQUESTS_PER_MINUTE=UNTHROTTLED)
    key = add_api_key(client("secretsmanager"), environment["API_KEYS_SECRET_ID"], "bench-user", "pro")
    # As in the endpoint section: the per-request AWS calls answered in constant time, the rest by moto; every
    # server what deploys, run as Lambda runs it (the MCP layer ships the OpenTelemetry SDK).
    aws_url = start_aws_stand_in(moto_url, client_cpus, [environment["JOB_TABLE_NAME"]], processes)
    servers = DeployedServers.prepare(local, aws_url, server_cpus, processes)
    off = {
        **environment,
        "AWS_REGION": "us-east-1",
        "AWS_LAMBDA_FUNCTION_NAME": "bench-McpServer",
        "TRACING_MODE": "off",
    }
    on = {**off, "TRACING_MODE": "otlp", "TRACING_SAMPLE_RATE": "1", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": receiver}

    # Cold start: import + create_app in a fresh interpreter of the deploy's runtime, tracing on against off, in
    # pairs; then tracing on against the stock app.
    python = servers.deployed.python
    on_env, off_env = servers.ours_environment(on), servers.ours_environment(off)
    cold = paired_runs(
        lambda: timed_in_new_interpreter(python, APP_BUILD, on_env),
        lambda: timed_in_new_interpreter(python, APP_BUILD, off_env),
        COLD_PAIRS,
    )
    stock_env = servers.stock_environment()
    stock_cold = paired_runs(
        lambda: timed_in_new_interpreter(python, APP_BUILD, on_env),
        lambda: timed_in_new_interpreter(python, STOCK_BUILD, stock_env),
        COLD_PAIRS,
    )

    servers_by_name = {
        "off": servers.ours("tracing-off", off),
        "on": servers.ours("tracing-on", on),
        "on_default": servers.ours("tracing-on-default", _at_default_rate(on)),
        "stock": servers.stock("tracing-stock", "create_app"),
        # The stock app answering JSON with a get_job tool that makes the same single GetItem as ours.
        "stock_getitem": servers.stock(
            "tracing-stock-getitem", "create_getitem_app", JOB_TABLE_NAME=environment["JOB_TABLE_NAME"]
        ),
    }

    ours_headers = {**HEADERS, "authorization": f"Bearer {key}"}
    get_job = call("get_job", {"job_id": UNKNOWN_JOB})
    # Each case against its baseline: tools/list against the stock app as it comes (SSE), tools/call against the
    # stock app whose get_job makes the same GetItem (as in the endpoint section).
    cases = {
        "tools/list": {"off": LIST, "on": LIST, "on_default": LIST, "stock": LIST},
        "tools/call": {"off": get_job, "on": get_job, "on_default": get_job, "stock_getitem": get_job},
    }
    exports_before = _Receiver.exports
    figures: dict[str, Any] = {}
    for case, bodies in cases.items():
        rounds: dict[str, list[tuple[float, float]]] = {name: [] for name in bodies}  # (CPU ms, req/s)
        baseline = next(name for name in bodies if name.startswith("stock"))
        for _ in range(ROUNDS):  # alternating, so drift on a shared machine hits every server alike
            for name in bodies:
                process, port = servers_by_name[name]
                headers = HEADERS if name.startswith("stock") else ours_headers
                url = f"http://127.0.0.1:{port}/mcp"
                rounds[name].append(_sequential(url, headers, bodies[name], client_cpus, process.pid))
        default_stock_rps = [
            (on[1], stock[1]) for on, stock in zip(rounds["on_default"], rounds[baseline], strict=True)
        ]
        figures[case] = {
            "cpu_ms": {name: min(cpu for cpu, _ in samples) for name, samples in rounds.items()},
            "rps": {name: max(rps for _, rps in samples) for name, samples in rounds.items()},
            "on_off_cpu_ratio": paired_ratio(
                [(on[0], off[0]) for on, off in zip(rounds["on"], rounds["off"], strict=True)]
            ),
            "on_off_rps_ratio": paired_ratio(
                [(on[1], off[1]) for on, off in zip(rounds["on"], rounds["off"], strict=True)]
            ),
            "on_stock_cpu_ratio": paired_ratio(
                [(on[0], stock[0]) for on, stock in zip(rounds["on"], rounds[baseline], strict=True)]
            ),
            "on_stock_rps_ratio": paired_ratio(
                [(on[1], stock[1]) for on, stock in zip(rounds["on"], rounds[baseline], strict=True)]
            ),
            "default_stock_rps_ratio": paired_ratio(default_stock_rps),
            "default_stock_rps_quartiles": paired_ratio_quartiles(default_stock_rps),
            "default_stock_cpu_ratio": paired_ratio(
                [(on[0], stock[0]) for on, stock in zip(rounds["on_default"], rounds[baseline], strict=True)]
            ),
            "default_off_cpu_ratio": paired_ratio(
                [(on[0], off[0]) for on, off in zip(rounds["on_default"], rounds["off"], strict=True)]
            ),
            "baseline": baseline,
        }
    figures["cold"] = {
        "on_ms": statistics.median(on for on, _ in cold) * 1000,
        "off_ms": statistics.median(off for _, off in cold) * 1000,
        "stock_ms": statistics.median(stock for _, stock in stock_cold) * 1000,
        "on_off_ratio": paired_ratio(cold),
        "on_stock_ratio": paired_ratio(stock_cold),
    }
    figures["exports"] = _Receiver.exports - exports_before
    # The every-request server's spans (the default-rate server adds about a twentieth more).
    figures["spans_per_request"] = _Receiver.spans / max(1, 2 * ROUNDS * (REQUESTS + 50))
    return figures


def _sequential(
    url: str, headers: dict[str, str], body: dict[str, Any], cpus: set[int], pid: int
) -> tuple[float, float]:
    """One round: 50 warm-up requests, then REQUESTS one after another; the server's CPU ms per request and req/s."""
    job = {"url": url, "headers": headers, "body": body}
    _run_load({**job, "phases": []}, cpus)
    before = cpu_seconds(pid) or 0.0
    [phase] = _run_load({**job, "phases": [{"requests": REQUESTS, "connections": 1}], "warm_up": 0}, cpus)
    return ((cpu_seconds(pid) or 0.0) - before) / REQUESTS * 1000, phase["rps"]


def _section(figures: dict[str, Any]) -> list[str]:
    cold = figures["cold"]
    lines = [
        "## Tracing on and off (McpServer)",
        "",
        "The endpoint as run.sh starts it on the deploy's runtime (python3.13) with the built code and layers, as "
        "the endpoint section starts it (the MCP layer ships the OpenTelemetry SDK), its AWS calls to the AWS "
        "stand-in in front of a moto server (as in the endpoint section); five servers, each pinned to one core, "
        "the load client, the stand-in and moto on the other: Tracing=off (the default); Tracing=otlp sampling "
        "every request (every span recorded, exported after each response to an OTLP/HTTP receiver on loopback); "
        "Tracing=otlp at the default sample rate (requests without a parent); and the stock SDK app "
        f"(`tests/bench/stock_app.py`). {REQUESTS} sequential requests per round on one keep-alive "
        f"connection (as Lambda runs the endpoint: one request at a time), {ROUNDS} alternating rounds after 50 "
        "warm-up requests; server CPU is the least of the rounds, req/s the best, a ratio the median of the "
        "rounds' ratios (in brackets, their quartiles: how far one round's ratio strays). Cold start: import + "
        "`create_app()` in a fresh interpreter of the runtime, "
        f"{COLD_PAIRS} pairs of tracing on and off, then as many of tracing on and the stock app (the ratios are "
        "the pairs' medians). "
        f"Spans received per request: {figures['spans_per_request']:.1f}, in {figures['exports']} exports.",
        "",
        "| measure | tracing off | tracing on (every request sampled) | on / off | stock SDK app | on / stock |",
        "|---|---|---|---|---|---|",
        f"| cold start, import + `create_app()` | {cold['off_ms']:.0f} ms | {cold['on_ms']:.0f} ms | "
        f"{cold['on_off_ratio']:.2f}x | {cold['stock_ms']:.0f} ms | {cold['on_stock_ratio']:.2f}x |",
    ]
    for case in ("tools/list", "tools/call"):
        row = figures[case]
        cpu, rps, baseline = row["cpu_ms"], row["rps"], row["baseline"]
        low, high = row["default_stock_rps_quartiles"]
        lines.append(
            f"| `{case}` server CPU per request | {cpu['off']:.2f} ms | {cpu['on']:.2f} ms | "
            f"{row['on_off_cpu_ratio']:.2f}x | {cpu[baseline]:.2f} ms (`{baseline}`) "
            f"| {row['on_stock_cpu_ratio']:.2f}x |"
        )
        lines.append(
            f"| `{case}` req/s, sequential | {rps['off']:.0f} | {rps['on']:.0f} | {row['on_off_rps_ratio']:.2f}x | "
            f"{rps[baseline]:.0f} (`{baseline}`) | {row['on_stock_rps_ratio']:.2f}x |"
        )
        lines.append(
            f"| `{case}` at the default sample rate ({TEMPLATE_SAMPLE_RATE}): CPU, req/s | | "
            f"{cpu['on_default']:.2f} ms, {rps['on_default']:.0f} req/s | {row['default_off_cpu_ratio']:.2f}x CPU | "
            f"| {row['default_stock_rps_ratio']:.2f}x req/s ({low:.2f}-{high:.2f}), "
            f"{row['default_stock_cpu_ratio']:.2f}x CPU |"
        )
    lines += [
        "",
        "Target: with tracing on, the endpoint no slower than the stock SDK app (req/s on / stock at least 1.0x): "
        "`tools/list` against the stock app as it comes (`stock`, an event stream), `tools/call` (`get_job` of an "
        "unknown job, one DynamoDB GetItem) against the stock app whose `get_job` makes the same read "
        "(`stock_getitem`, JSON). With tracing off nothing of "
        "OpenTelemetry is imported by our code and no span middleware is in the path; the SDK's own MCP span runs "
        "on the API's no-op tracer in both our app and the stock app. At the default `TracingSampleRate` (0.05) "
        "a request without a sampled parent records no spans 95 times in 100: its cost is close to the off column.",
        "",
    ]
    return lines
