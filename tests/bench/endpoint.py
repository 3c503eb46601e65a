"""The MCP endpoint against the official SDK's stock stateless app, served the same way and loaded the same way.

Each server runs in its own process, started as McpServer's run.sh starts uvicorn (ours through run.sh
itself, the stock app with the same uvicorn command line); the load client (tests.bench.load) runs in
another process; the AWS calls reach a stand-in (tests.bench.aws_stand_in) that answers the per-request ones
from memory and hands the rest to a moto server. With two cores or more, the server is pinned to one core and
the client, the stand-in and moto to another, so none of them steals the server's CPU.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import boto3
import httpx

from devstack.runtime.procfs import cpu_seconds
from mcp_backend.jobs.models import JobMessage
from mcp_backend.jobs.store import JobStore
from tests.bench.aws_stand_in import ANSWERED
from tests.bench.load import WARM_UP_REQUESTS
from tests.bench.measure import (
    RESULTS,
    ROOT,
    DeployedPython,
    paired_ratio,
    paired_ratio_quartiles,
    paired_runs,
    probe_in_new_interpreter,
)
from tests.e2e.conftest import free_port, mcp_environment

# Server output goes to files: a pipe nobody reads would block a server that logs each request.
# The load is far above a tier's rate: the limiter still leases (blocks of 50 at this limit), it never refuses.
UNTHROTTLED = "1000000"
LOGS = ROOT / "build" / "bench-logs"
RUN_SH = ROOT / "functions" / "mcp_server" / "run.sh"
SEQUENTIAL = 300
CONCURRENT = 1200
CONNECTIONS = 8
# Least-CPU and paired-ratio statistics of eight rounds: with four, the stock baseline still moved by a fifth
# between quiet runs.
ROUNDS = int(os.environ.get("BENCH_ENDPOINT_ROUNDS", "12"))  # fewer for a quick side-by-side check
PHASES = [{"requests": SEQUENTIAL, "connections": 1}, {"requests": CONCURRENT, "connections": CONNECTIONS}]
UNKNOWN_JOB = "00000000-0000-4000-8000-000000000000"
# The bench user's finished job: a client polling its job, the call answered with the job and its result.
FINISHED_JOB = "00000000-0000-4000-8000-000000000001"


def cores() -> tuple[set[int], set[int]]:
    """The server's core and the client's (and moto's): separate when the machine has two."""
    available = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if len(available) < 2:
        return set(available), set(available)
    return {available[0]}, set(available[1:])


def pinned(cpus: set[int]):
    if not cpus or not hasattr(os, "sched_setaffinity"):
        return None
    return lambda: os.sched_setaffinity(0, cpus)


def uvicorn_command(factory: str, port: int, python: Path) -> list[str]:
    """run.sh's uvicorn command line, with another factory (the stock app), a port and an interpreter."""
    exec_line = " ".join(
        line.strip().rstrip("\\").strip()
        for line in RUN_SH.read_text().split("\nexec ", 1)[1].splitlines()
        if line.strip()
    )
    words = shlex.split(exec_line.replace('"${PORT:-8080}"', str(port)))
    words[words.index("mcp_backend.mcp.server:create_app")] = factory
    return [str(python) if words[0] == "python3" else words[0], *words[1:]]


def logs(name: str) -> IO[bytes]:
    LOGS.mkdir(parents=True, exist_ok=True)
    return (LOGS / f"{name}.log").open("wb")


def wait_for(port: int, process: subprocess.Popen, path: str = "/") -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server on {port} exited with {process.returncode}: see {LOGS}")
        try:
            httpx.get(f"http://127.0.0.1:{port}{path}", timeout=1)
            return
        except httpx.TransportError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing answered on 127.0.0.1:{port}")


def load(
    url: str,
    headers: dict[str, str],
    body: dict[str, Any],
    cpus: set[int],
    server_pid: int,
    emulator_pids: tuple[int, ...] = (),
) -> dict[str, Any]:
    """One round: 50 warm-up requests, then each phase in a load process of its own, with the server process's CPU
    time (user + system) per request over each phase: unlike req/s, it hardly moves when other work shares the
    machine. The sequential phase is how Lambda runs the endpoint: one request at a time per environment.
    With `emulator_pids` (moto and the AWS stand-in, on the client's core), also how busy that core was over each
    phase: the client's and theirs CPU over the phase's wall time. Near 100%, the phase's req/s measures that core,
    not the server."""
    job = {"url": url, "headers": headers, "body": body}
    _run_load({**job, "phases": []}, cpus)
    phases, server_cpu_ms, client_core_busy, client_seconds = [], {}, {}, 0.0
    for phase in PHASES:
        cpu_before, emulator_before = cpu_seconds(server_pid), _cpu_or_none(emulator_pids)
        client_before = resource.getrusage(resource.RUSAGE_CHILDREN)
        measured = _run_load({**job, "phases": [phase], "warm_up": 0}, cpus)
        phases.extend(measured)
        cpu_after, emulator_after = cpu_seconds(server_pid), _cpu_or_none(emulator_pids)
        client_after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if cpu_before is not None and cpu_after is not None:
            server_cpu_ms[phase_name(phase)] = (cpu_after - cpu_before) / phase["requests"] * 1000
        spent = sum(getattr(client_after, f) - getattr(client_before, f) for f in ("ru_utime", "ru_stime"))
        client_seconds += spent
        if emulator_before is not None and emulator_after is not None and measured and measured[0]["rps"] > 0:
            wall = phase["requests"] / measured[0]["rps"]
            client_core_busy[phase_name(phase)] = (spent + emulator_after - emulator_before) / wall
    # The client's whole processes (their interpreters' start included) per request: an upper bound on what it spends.
    requests = sum(phase["requests"] for phase in PHASES)
    return {
        "phases": phases,
        "server_cpu_ms": server_cpu_ms,
        "client_cpu_ms": client_seconds / requests * 1000,
        "client_core_busy": client_core_busy,
    }


def _cpu_or_none(pids: tuple[int, ...]) -> float | None:
    seconds = [cpu_seconds(pid) for pid in pids]
    return sum(s for s in seconds if s is not None) if pids and None not in seconds else None


def _run_load(job: dict[str, Any], cpus: set[int]) -> list[dict[str, Any]]:
    out = subprocess.run(
        [sys.executable, "-m", "tests.bench.load"],
        input=json.dumps(job),
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
        preexec_fn=pinned(cpus),
    )
    if out.returncode != 0:
        raise RuntimeError(f"load on {job['url']} failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout)


def phase_name(phase: dict[str, Any]) -> str:
    return "sequential" if phase["connections"] == 1 else f"{phase['connections']} connections"


def call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name, "arguments": arguments}}


LIST = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
STOCK_FACTORIES = {"stock": "create_app", "stock_json": "create_json_app", "stock_getitem": "create_getitem_app"}
HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
# What the Lambda Web Adapter forwards with each Function URL request (request id; an unsampled trace).
ADAPTER_HEADERS = {
    "x-amzn-request-context": json.dumps({"requestId": "0b1c2d3e-bench"}),
    "x-amzn-trace-id": "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=0",
}


COLD_RUNS = 15
# Import the app module and build the app, in a fresh interpreter: what a cold start pays before uvicorn serves,
# and how often the cyclic garbage collector ran meanwhile. "paused": the collector paused as McpServer's app
# module pauses it (off before the import, the startup heap frozen and the collector on again after the build).
COLD_PROBE = (
    "import gc, json, sys, time, importlib\n"
    "collections = []\n"
    "gc.callbacks.append(lambda phase, info: phase == 'start' and collections.append(info['generation']))\n"
    "paused = sys.argv[3] == 'paused'\n"
    "wall, cpu = time.perf_counter(), time.process_time()\n"
    "if paused:\n"
    "    gc.disable()\n"
    "module = importlib.import_module(sys.argv[1])\n"
    "getattr(module, sys.argv[2])()\n"
    "if paused:\n"
    "    gc.freeze()\n"
    "    gc.enable()\n"
    "print(json.dumps({'wall': time.perf_counter() - wall, 'cpu': time.process_time() - cpu,\n"
    "                  'collections': len(collections)}))\n"
)


def cold_start() -> dict[str, Any]:
    """Ours (McpServer's app module and create_app, its template environment, its built code and layers) and
    the stock app (tests/bench/stock_app.py's create_app, on the same layers: the SDK and pydantic), each
    `COLD_RUNS` times in a fresh interpreter of the deploy's runtime, alternating: median wall and CPU seconds
    of import + create_app."""
    import boto3
    from moto import mock_aws

    from devstack.runtime.in_process import function_environment
    from devstack.stack.resources import LocalStack

    with mock_aws():
        stack = LocalStack(boto3.client).create_all()
        spec = stack.function("McpServer")
    deployed = DeployedPython.prepare(stack.template)
    layer_ids = deployed.layer_ids(spec.layer_refs)
    with function_environment(spec, stack.region):
        variables = {name: os.environ[name] for name in (*spec.environment, "AWS_REGION")}
    credentials = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": "us-east-1"}
    ours_env = deployed.environment(deployed.build_dir / spec.logical_id, layer_ids, **credentials, **variables)
    stock_env = deployed.environment(stock_app_dir(), layer_ids, **credentials)
    stock = functools.partial(_cold, deployed, stock_env, "stock_app")
    runs = {
        "ours": paired_runs(functools.partial(_cold, deployed, ours_env, "mcp_backend.mcp.server"), stock, COLD_RUNS),
        "stock_paused": paired_runs(functools.partial(stock, paused=True), stock, COLD_RUNS),
    }
    figures: dict[str, Any] = {}
    for name, pairs in runs.items():
        figures[name] = _medians([app for app, _ in pairs])
        figures[f"{name}_ratio"] = {
            kind: paired_ratio([(app[kind], baseline[kind]) for app, baseline in pairs]) for kind in ("wall", "cpu")
        }
    figures["stock"] = _medians([baseline for pairs in runs.values() for _, baseline in pairs])
    return figures


def stock_app_dir() -> Path:
    """A folder holding only tests/bench/stock_app.py: the stock app's code, as a function's code folder."""
    stock_dir = ROOT / "build" / "bench-stock-app"
    stock_dir.mkdir(parents=True, exist_ok=True)
    shutil.copy(Path(__file__).with_name("stock_app.py"), stock_dir / "stock_app.py")
    return stock_dir


def _medians(samples: list[dict[str, float]]) -> dict[str, float]:
    """Median wall and CPU ms and collector runs of a set of cold starts."""
    figures = {kind: statistics.median(sample[kind] for sample in samples) * 1000 for kind in ("wall", "cpu")}
    figures["collections"] = statistics.median(sample["collections"] for sample in samples)
    return figures


def _cold(
    deployed: DeployedPython, environment: dict[str, str], module: str, *, paused: bool = False
) -> dict[str, float]:
    arguments = [module, "create_app", "paused" if paused else "as-is"]
    return probe_in_new_interpreter(deployed.python, COLD_PROBE, arguments, environment)


def _cold_section(figures: dict[str, Any]) -> list[str]:
    ours, stock, paused = figures["ours"], figures["stock"], figures["stock_paused"]
    ratio, paused_ratio = figures["ours_ratio"], figures["stock_paused_ratio"]
    return [
        "### Cold start: import and create_app",
        "",
        "The app module imported and the app built in a fresh interpreter of the deploy's runtime, "
        "`import + create_app()` timed from inside (the interpreter's own start left out), median of "
        f"{COLD_RUNS} pairs of runs, one of each, which runs first swapped every pair: ours with McpServer's "
        "template environment and its built code and layers (.pyc precompiled, as deployed), against the stock "
        "app (`tests/bench/stock_app.py`'s `create_app`) on the same layers (it imports none of our code); then "
        f"{COLD_RUNS} pairs of the stock app with the garbage collector paused as ours pauses it (off before the "
        "import, the startup heap frozen after the build), against the stock app as it is: what the pause alone "
        "is worth. CPU is the process's user + system time over the same span; collector runs are counted with "
        "`gc.callbacks`. A ratio is the median of its pairs' ratios (a shared machine's load moves both runs of "
        "a pair alike). Target: ours at most 1.0x the stock app.",
        "",
        "| app | wall | CPU | collector runs | wall / stock | CPU / stock |",
        "|---|---|---|---|---|---|",
        f"| ours | {ours['wall']:.0f} ms | {ours['cpu']:.0f} ms | {ours['collections']:.0f} | "
        f"{ratio['wall']:.2f}x | {ratio['cpu']:.2f}x |",
        f"| stock | {stock['wall']:.0f} ms | {stock['cpu']:.0f} ms | {stock['collections']:.0f} | | |",
        f"| stock, collector paused as ours | {paused['wall']:.0f} ms | {paused['cpu']:.0f} ms | "
        f"{paused['collections']:.0f} | {paused_ratio['wall']:.2f}x | {paused_ratio['cpu']:.2f}x |",
        "",
    ]


def run() -> list[str]:
    cold = cold_start()
    RESULTS["endpoint_cold_start"] = cold
    return [*_load_run(), *_cold_section(cold)]


@contextlib.contextmanager
def moto_server(cpus: set[int]) -> Iterator[tuple[str, list[subprocess.Popen]]]:
    """A moto server in its own process on `cpus`: its URL, and the list of processes a bench starts, every one of
    them ended when the block ends."""
    port = free_port()
    moto = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=pinned(cpus),
    )
    processes = [moto]
    try:
        wait_for(port, moto, "/moto-api/")
        yield f"http://127.0.0.1:{port}", processes
    finally:
        for process in processes:
            process.terminate()
            process.wait(timeout=10)


def start_aws_stand_in(moto_url: str, cpus: set[int], static_tables: list[str], processes: list) -> str:
    """The AWS stand-in (tests/bench/aws_stand_in.py) in its own process on `cpus`, in front of moto: its URL. It is
    added to `processes`, so the block that started moto ends it too."""
    port = free_port()
    tables = [word for table in static_tables for word in ("--static-table", table)]
    stand_in = subprocess.Popen(
        [sys.executable, "-m", "tests.bench.aws_stand_in", "--port", str(port), "--moto", moto_url, *tables],
        cwd=ROOT,
        stdout=logs("aws-stand-in"),
        stderr=subprocess.STDOUT,
        preexec_fn=pinned(cpus),
    )
    processes.append(stand_in)
    wait_for(port, stand_in, "/moto-api/")
    return f"http://127.0.0.1:{port}"


@dataclass
class DeployedServers:
    """Servers started as Lambda runs McpServer: the deploy's runtime (python3.13), the built code and layers with
    their precompiled .pyc, boto3 from the runtime's own packages (DeployedPython); ours through run.sh, the stock
    app (tests/bench/stock_app.py, which imports none of ours) with the same uvicorn command line on McpServer's
    layers (the SDK, uvicorn, pydantic). Each pinned to `cpus`, its AWS calls to `aws_url`, added to `processes`."""

    deployed: DeployedPython
    code_dir: Path
    layer_ids: list[str]
    base_env: dict[str, str]
    cpus: set[int]
    processes: list[subprocess.Popen]

    @classmethod
    def prepare(cls, local: Any, aws_url: str, cpus: set[int], processes: list[subprocess.Popen]) -> DeployedServers:
        deployed = DeployedPython.prepare(local.stack.template)
        spec = local.stack.function("McpServer")
        base_env = {
            "HOME": os.environ.get("HOME", "/tmp"),
            "AWS_ACCESS_KEY_ID": "bench",
            "AWS_SECRET_ACCESS_KEY": "bench",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": aws_url,
        }
        code_dir = deployed.build_dir / spec.logical_id
        return cls(deployed, code_dir, deployed.layer_ids(spec.layer_refs), base_env, cpus, processes)

    def ours_environment(self, environment: dict[str, str]) -> dict[str, str]:
        """A new interpreter's environment for ours: its code, its layers, the runtime's packages."""
        return self.deployed.environment(self.code_dir, self.layer_ids, **self.base_env, **environment)

    def stock_environment(self, **variables: str) -> dict[str, str]:
        return self.deployed.environment(stock_app_dir(), self.layer_ids, **self.base_env, **variables)

    def ours(self, name: str, environment: dict[str, str]) -> tuple[subprocess.Popen, int]:
        """Ours through its run.sh, ready: the process and its port."""
        bin_dir = ROOT / "build" / "bench-bin"  # run.sh starts `python3`: the runtime's, as on Lambda
        bin_dir.mkdir(parents=True, exist_ok=True)
        (bin_dir / "python3").unlink(missing_ok=True)
        (bin_dir / "python3").symlink_to(self.deployed.python)
        env = self.deployed.environment(None, self.layer_ids, **self.base_env, **environment)
        port = free_port()
        env |= {"PATH": f"{bin_dir}:{env['PATH']}", "PORT": str(port), "LAMBDA_TASK_ROOT": str(self.code_dir)}
        return self._started(["bash", str(self.code_dir / RUN_SH.name)], env, name, port, "/healthz")

    def stock(self, name: str, factory: str, **variables: str) -> tuple[subprocess.Popen, int]:
        """The stock app's `factory` (a function of tests/bench/stock_app.py), ready: the process and its port."""
        port = free_port()
        command = uvicorn_command(f"stock_app:{factory}", port, self.deployed.python)
        return self._started(command, self.stock_environment(**variables), name, port, "/")

    def _started(
        self, command: list[str], env: dict[str, str], name: str, port: int, ready_path: str
    ) -> tuple[subprocess.Popen, int]:
        process = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=logs(name), stderr=subprocess.STDOUT, preexec_fn=pinned(self.cpus)
        )
        self.processes.append(process)
        wait_for(port, process, ready_path)
        return process, port


def _load_run() -> list[str]:
    server_cpus, client_cpus = cores()
    with moto_server(client_cpus) as (moto_url, processes):
        results = _measure(moto_url, server_cpus, client_cpus, processes)
    return _section(results, server_cpus, client_cpus)


def _measure(moto_url: str, server_cpus: set[int], client_cpus: set[int], processes: list) -> dict[str, Any]:
    from devstack.wired_stack import LocalEnvironment
    from mcp_backend.api_keys import add_api_key

    def client(service: str) -> Any:
        return boto3.client(service, endpoint_url=moto_url, region_name="us-east-1")

    local = LocalEnvironment(client)
    environment = mcp_environment(local, SSE_KEEPALIVE_SECONDS="15", LIMIT_PRO_REQUESTS_PER_MINUTE=UNTHROTTLED)
    key = add_api_key(client("secretsmanager"), environment["API_KEYS_SECRET_ID"], "bench-user", "pro")
    finished_job(JobStore(environment["JOB_TABLE_NAME"], client("dynamodb")), "apikey:bench-user")
    # The servers call AWS through the stand-in: the job table's GetItem and the call log's PutRecords answered in
    # constant time, as other machines answer them on AWS; the rest (the rate limiter's leases) by moto.
    aws_url = start_aws_stand_in(moto_url, client_cpus, [environment["JOB_TABLE_NAME"]], processes)
    emulators = tuple(process.pid for process in processes)  # moto and the stand-in, on the client's core

    # Every server runs what deploys, the way Lambda runs it (DeployedServers).
    servers = DeployedServers.prepare(local, aws_url, server_cpus, processes)
    ours, ours_port = servers.ours("ours", environment)
    # The stock app three times: with its defaults (the baseline), answering JSON (what the event stream costs),
    # and answering JSON with a get_job tool that makes the same single GetItem as ours (the tools/call baseline).
    stock_servers = {
        name: servers.stock(name, factory, JOB_TABLE_NAME=environment["JOB_TABLE_NAME"])
        for name, factory in STOCK_FACTORIES.items()
    }

    ours_url = f"http://127.0.0.1:{ours_port}/mcp"
    ours_headers = {**HEADERS, **ADAPTER_HEADERS, "authorization": f"Bearer {key}"}
    get_job = call("get_job", {"job_id": UNKNOWN_JOB})
    get_finished = call("get_job", {"job_id": FINISHED_JOB})
    echo = call("echo", {"text": "bench"})
    cases = {
        "tools/list": {"ours": LIST, "stock": LIST, "stock_json": LIST, "stock_getitem": LIST},
        "tools/call": {"ours": get_job, "stock": echo, "stock_json": echo, "stock_getitem": get_job},
        "tools/call, a finished job": {
            "ours": get_finished,
            "stock": echo,
            "stock_json": echo,
            "stock_getitem": get_finished,
        },
    }
    results: dict[str, Any] = {}
    load_before = os.getloadavg()
    for case, bodies in cases.items():
        runs: dict[str, list[dict[str, Any]]] = {"ours": [], **{name: [] for name in stock_servers}}
        for _ in range(ROUNDS):  # alternate, so drift on a shared machine hits every server
            for name, (process, port) in stock_servers.items():
                url = f"http://127.0.0.1:{port}/mcp"
                runs[name].append(load(url, HEADERS, bodies[name], client_cpus, process.pid, emulators))
            runs["ours"].append(load(ours_url, ours_headers, bodies["ours"], client_cpus, ours.pid, emulators))
        results[case] = {name: _best([r["phases"] for r in rounds]) for name, rounds in runs.items()}
        results[case]["server_cpu_ms"] = {name: _least_cpu(rounds) for name, rounds in runs.items()}
        results[case]["server_cpu_ratio"] = {
            name: _paired_cpu_ratio(runs["ours"], rounds) for name, rounds in runs.items()
        }
        results[case]["server_cpu_ratio_quartiles"] = {
            name: _paired_cpu_quartiles(runs["ours"], rounds) for name, rounds in runs.items() if name != "ours"
        }
        results[case]["rps_ratio"] = {name: _paired_rps_ratio(runs["ours"], rounds) for name, rounds in runs.items()}
        results[case]["rps_ratio_quartiles"] = {
            name: _paired_rps_quartiles(runs["ours"], rounds) for name, rounds in runs.items() if name != "ours"
        }
        results[case]["client_cpu_ms"] = max(r["client_cpu_ms"] for rounds in runs.values() for r in rounds)
        results[case]["client_core_busy"] = {name: _median_busy(rounds) for name, rounds in runs.items()}
    _check_stand_in_answered(aws_url, sum(name.startswith("tools/call") for name in cases))
    # The machine is shared: its load average (1, 5, 15 min) before and after the rounds, beside the figures.
    load_average = {"before": [round(x, 2) for x in load_before], "after": [round(x, 2) for x in os.getloadavg()]}
    RESULTS["endpoint"] = {
        "server_cpus": sorted(server_cpus),
        "client_cpus": sorted(client_cpus),
        "load_average": load_average,
        **results,
    }
    return results


def _check_stand_in_answered(aws_url: str, call_cases: int) -> None:
    """Every measured `get_job` (ours' and the stock app's) read its job through the stand-in, and ours' call log
    reached it: else a server calling elsewhere, or failing its GetItem into a tool error, was measured."""
    answered = httpx.get(f"{aws_url}{ANSWERED}", timeout=10).json()
    requests_per_round = WARM_UP_REQUESTS + sum(phase["requests"] for phase in PHASES)
    expected = call_cases * 2 * ROUNDS * requests_per_round  # ours and stock_getitem
    if answered["kept"] < expected or not answered["put_records"]:
        raise RuntimeError(f"the AWS stand-in answered {answered}, expected {expected} job reads and a call log")


def finished_job(store: JobStore, user_id: str) -> None:
    """The bench user's job, submitted and succeeded through the job store, as the worker leaves it."""
    job = JobMessage(job_id=FINISHED_JOB, user_id=user_id, tool="analyze_dataset", input={"dataset_url": "s3://b/k"})
    store.create_pending(job)
    store.mark_succeeded(job, result_text=json.dumps({"rowCount": 6, "columns": {"score": {"mean": 48.0}}}))


def _loads(when: str) -> str:
    return ", ".join(f"{x:.2f}" for x in RESULTS.get("endpoint", {}).get("load_average", {}).get(when, []))


def _spread(quartiles: list[float] | None) -> str:
    return f" ({quartiles[0]:.2f}-{quartiles[1]:.2f})" if quartiles else ""


def _best(rounds: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Per phase, the round with the highest rate (the least disturbed by other work on the machine)."""
    return [max((r[i] for r in rounds), key=lambda phase: phase["rps"]) for i in range(len(PHASES))]


def _paired_cpu_ratio(ours: list[dict[str, Any]], baseline: list[dict[str, Any]]) -> dict[str, float]:
    """Per phase, the median over the rounds of ours' server CPU per request / the baseline's in the same round
    (measured one after the other): a shared machine's load moves both alike, and a ratio of two least values
    taken minutes apart moved by a tenth between runs."""
    return {phase: paired_ratio(pairs) for phase, pairs in _cpu_pairs(ours, baseline).items()}


def _paired_cpu_quartiles(ours: list[dict[str, Any]], baseline: list[dict[str, Any]]) -> dict[str, list[float]]:
    """Per phase, the quartiles of the same rounds' ratios: the spread a single round's ratio has here."""
    return {phase: list(paired_ratio_quartiles(pairs)) for phase, pairs in _cpu_pairs(ours, baseline).items()}


def _cpu_pairs(ours: list[dict[str, Any]], baseline: list[dict[str, Any]]) -> dict[str, list[tuple[float, float]]]:
    phases = {phase for r in ours for phase in r["server_cpu_ms"]}
    return {
        phase: [(o["server_cpu_ms"][phase], b["server_cpu_ms"][phase]) for o, b in zip(ours, baseline, strict=True)]
        for phase in phases
        if all(phase in r["server_cpu_ms"] for r in (*ours, *baseline))
    }


def _paired_rps_ratio(ours: list[dict[str, Any]], baseline: list[dict[str, Any]]) -> dict[str, float]:
    """Per phase, the median over the rounds of ours' req/s / the baseline's in the same round: the target's
    statistic. A ratio of two bests picks each server's luckiest round, which here strays by a tenth or more."""
    return {phase: paired_ratio(pairs) for phase, pairs in _rps_pairs(ours, baseline).items()}


def _paired_rps_quartiles(ours: list[dict[str, Any]], baseline: list[dict[str, Any]]) -> dict[str, list[float]]:
    return {phase: list(paired_ratio_quartiles(pairs)) for phase, pairs in _rps_pairs(ours, baseline).items()}


def _rps_pairs(ours: list[dict[str, Any]], baseline: list[dict[str, Any]]) -> dict[str, list[tuple[float, float]]]:
    return {
        phase_name(phase): [(o["phases"][i]["rps"], b["phases"][i]["rps"]) for o, b in zip(ours, baseline, strict=True)]
        for i, phase in enumerate(PHASES)
    }


def _median_busy(rounds: list[dict[str, Any]]) -> dict[str, float]:
    """Per phase, the median over the rounds of the client core's busy share."""
    names = {name for r in rounds for name in r.get("client_core_busy", {})}
    return {
        name: statistics.median(r["client_core_busy"][name] for r in rounds if name in r["client_core_busy"])
        for name in names
    }


def _least_cpu(rounds: list[dict[str, Any]]) -> dict[str, float]:
    """Per phase, the least server CPU per request of the rounds."""
    names = {name for r in rounds for name in r["server_cpu_ms"]}
    return {name: min(r["server_cpu_ms"][name] for r in rounds if name in r["server_cpu_ms"]) for name in names}


def _section(results: dict[str, Any], server_cpus: set[int], client_cpus: set[int]) -> list[str]:
    pinning = (
        f"server on CPU {sorted(server_cpus)}, load client, AWS stand-in and moto on CPU {sorted(client_cpus)}"
        if server_cpus != client_cpus
        else "one core: server, client, AWS stand-in and moto share it"
    )
    lines = [
        "## MCP endpoint against the stock SDK app",
        "",
        "Each server in its own process, started as `functions/mcp_server/run.sh` starts uvicorn (ours through "
        "run.sh with the McpServer template environment; the stock app, `tests/bench/stock_app.py`: the SDK's "
        "`MCPServer.streamable_http_app(stateless_http=True)` with defaults and one `echo` tool, with the same "
        "uvicorn command line). Both on the deploy's runtime (python3.13) with the built code and McpServer's built "
        "layers (.pyc precompiled, boto3 from the runtime's packages): what deploys, run as Lambda runs it. "
        "The load client (`tests/bench/load.py`, h11 over asyncio streams) in another "
        f"process; {pinning}. "
        f"Per server and request: {SEQUENTIAL} sequential requests on one keep-alive connection, then {CONCURRENT} "
        f"over {CONNECTIONS} connections; best of {ROUNDS} alternating rounds after 50 warm-up requests. Ours with "
        "bearer auth, the Host/Origin guard and telemetry on (correlation id, the request log line, the call-log "
        "record of each `tools/call` to Kinesis); its `tools/call` is `get_job` of an unknown job id "
        "(a DynamoDB GetItem, answered with a tool error), and of the caller's finished job (the same "
        "GetItem, answered with the job and its result), the stock app's is `echo`. Every server's AWS calls go to "
        "`tests/bench/aws_stand_in.py`: the job table's GetItem (moto's own answer, kept) and the call log's "
        "PutRecords answered from memory, in the same constant time for every server, as other machines answer "
        "them on AWS; the rest (the rate limiter's leases, Secrets Manager) forwarded to a moto server. With moto "
        "answering every call on the client's core, its queue (a few hundred records of call log take it tens of "
        "milliseconds) set the req/s of the server that makes more calls. Where the time goes: "
        'docs/mcp-endpoint.md, "Where a request\'s time goes" (`python -m tests.bench.profile_endpoint`).',
        "",
        f"The machine's load average (1, 5 and 15 min) before the rounds: {_loads('before')}; after: "
        f"{_loads('after')} (on {os.cpu_count()} cores, shared with other work).",
        "",
        "| request | phase | ours req/s | stock req/s | ratio | ours p50 / p99 | stock p50 / p99 |",
        "|---|---|---|---|---|---|---|",
    ]
    for case, runs in results.items():
        for ours, stock in zip(runs["ours"], runs["stock"], strict=True):
            phase = phase_name(ours)
            lines.append(
                f"| `{case}` | {phase} | {ours['rps']:.0f} | {stock['rps']:.0f} | {ours['rps'] / stock['rps']:.2f}x "
                f"| {ours['p50_ms']:.1f} / {ours['p99_ms']:.1f} ms | {stock['p50_ms']:.1f} / {stock['p99_ms']:.1f} ms |"
            )
    lines += [
        "",
        "Server CPU time per request (the server process's user + system time over each phase, warm-up left out, "
        "least of the rounds; Linux only): what the server itself spends, less disturbed than req/s by other "
        "work on the machine, though not immune to it. Ours / this server is the median over the rounds of the "
        "two servers' ratio in the same round (each round runs the servers one after the other); in brackets, the "
        "quartiles of those ratios: the spread of one round's ratio on this machine. "
        "Sequential is how Lambda runs the endpoint: an execution "
        "environment serves one request at a time and waits idle between them "
        "(https://docs.aws.amazon.com/lambda/latest/dg/lambda-concurrency.html); over "
        f"{CONNECTIONS} connections the server is never idle, so what each wake-up costs is shared by many requests.",
        "",
        "| request | server | CPU / request, sequential | ours / this server "
        f"| CPU / request, {CONNECTIONS} connections | ours / this server |",
        "|---|---|---|---|---|---|",
    ]
    for case, runs in results.items():
        cpu, ratio = runs["server_cpu_ms"], runs["server_cpu_ratio"]
        quartiles = runs.get("server_cpu_ratio_quartiles", {})
        for name in ("ours", *STOCK_FACTORIES):
            cells = [
                f"{cpu[name][phase]:.2f} ms | {ratio[name][phase]:.2f}x{_spread(quartiles.get(name, {}).get(phase))}"
                if cpu.get(name, {}).get(phase) and ratio.get(name, {}).get(phase)
                else "n/a | n/a"
                for phase in map(phase_name, PHASES)
            ]
            lines.append(f"| `{case}` | {name} | {' | '.join(cells)} |")
    client = ", ".join(f"`{case}` {runs['client_cpu_ms']:.2f} ms" for case, runs in results.items())
    lines += [
        "",
        f"The load client's CPU per request, its whole processes (their interpreters' start included), most of any "
        f"round: {client}. Below every server's (httpx's client, used before, spent about 2 ms per request: it "
        "was the bottleneck, and those req/s measured it); the client's core also runs the AWS stand-in and moto "
        "(below).",
    ]
    busy_rows = [
        f"| {label} | {name} | "
        + " | ".join(f"{runs['client_core_busy'][name][phase_name(p)]:.0%}" for p in PHASES)
        + " |"
        for label, runs in ((f"`{case}`", runs) for case, runs in results.items())
        for name in ("ours", "stock_getitem")
        if all(phase_name(p) in runs.get("client_core_busy", {}).get(name, {}) for p in PHASES)
    ]
    if busy_rows:
        lines += [
            "",
            "How busy the load client's core was over each phase (the client's, the stand-in's and moto's CPU over "
            "the phase's wall time, median of the rounds). Near 100%, a phase's req/s would measure that core, not "
            "the server; the server CPU per request does not depend on it.",
            "",
            "| request | server | " + " | ".join(phase_name(p) for p in PHASES) + " |",
            "|---|---|" + "---|" * len(PHASES),
            *busy_rows,
        ]
    lines += [
        "",
        "Targets, from the same rounds: `tools/list` over "
        f"{CONNECTIONS} connections at least 1.1x the stock app answering JSON (`json_response=True`); `tools/call` "
        "at least 1.0x the req/s of the stock app whose `get_job` makes the same single GetItem "
        f"(`create_getitem_app`, JSON), sequential and over {CONNECTIONS} connections. "
        "Ours answers JSON for requests ready at once and an event "
        "stream only for calls that report progress (docs/mcp-endpoint.md). A ratio is the median over the "
        f"{ROUNDS} rounds of ours' req/s over the other server's in the same round (in brackets, the quartiles); "
        "the target reads it. After it, the ratio of the two servers' best rounds (the first table's figures).",
        "",
        "| request | phase | ours / stock (SSE) | ours / stock (JSON) | ours / stock get_job (JSON) "
        "| best / best, get_job (JSON) |",
        "|---|---|---|---|---|---|",
    ]
    for case, runs in results.items():
        for index, ours in enumerate(runs["ours"]):
            phase = phase_name(ours)
            ratios = " | ".join(
                f"{runs['rps_ratio'][name][phase]:.2f}x{_spread(runs['rps_ratio_quartiles'][name][phase])}"
                for name in ("stock", "stock_json", "stock_getitem")
            )
            best = ours["rps"] / runs["stock_getitem"][index]["rps"]
            lines.append(f"| `{case}` | {phase} | {ratios} | {best:.2f}x |")
    return [*lines, ""]


if __name__ == "__main__":  # `python -m tests.bench.endpoint`: the cold start alone
    print("\n".join(_cold_section(cold_start())))
