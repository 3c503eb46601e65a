"""The local stack: `make dev` start to ready, one job's latency through it (submit -> SUCCEEDED), and the CPU
it uses at rest in each runtime."""

from __future__ import annotations

import json
import signal
import statistics
import threading
import time
import uuid

import boto3

from devstack.runtime import procfs
from devstack.stack.template import load_template
from tests.bench.measure import RESULTS, fresh_interpreter_seconds
from tests.e2e.conftest import BUILD_DIR, start_make_dev

STARTS = 3
JOBS = 3
IDLE_SECONDS = 60
SETTLE_SECONDS = 5
RUNTIMES = ("inprocess", "lambda")
QUIET_PROBES = "ProbeScheduleExpression=rate(1 hour)"


def run() -> list[str]:
    window = load_template().resource("ToolWorkerJobQueueMapping")["Properties"]["MaximumBatchingWindowInSeconds"]
    starts, latencies = [], []
    for attempt in range(STARTS):
        started = time.perf_counter()
        process, port, line = start_make_dev()
        try:
            assert "local stack ready" in line, line
            # Drain the output meanwhile: a full pipe would block the stack's writes, and its shutdown with them.
            threading.Thread(target=process.stdout.read, daemon=True).start()
            starts.append(time.perf_counter() - started)
            if attempt == 0:
                latencies = [job_latency(port) for _ in range(JOBS)]
        finally:
            process.send_signal(signal.SIGINT)
            process.wait(timeout=60)
    idle = {runtime: idle_cpu_seconds(runtime) for runtime in RUNTIMES}
    baseline = fresh_interpreter_seconds("import boto3, moto.server", 3)
    start, latency = statistics.median(starts), statistics.median(latencies)
    RESULTS["local_stack"] = {
        "start_s": start,
        "job_latency_s": latency,
        "batching_window_s": window,
        "idle_cpu_s": idle,
        "idle_s": IDLE_SECONDS,
    }
    lines = [
        "## Local stack",
        "",
        f"`python -m devstack dev` (what `make dev` runs) started {STARTS} times; {JOBS} `analyze_dataset` jobs "
        f"sent to the JobQueue of the first, each timed until JobTable says SUCCEEDED. The mapping's "
        f"MaximumBatchingWindowInSeconds is {window} s: a lone message waits the window out, as on AWS.",
        "",
        "| measure | value | baseline | ratio |",
        "|---|---|---|---|",
        f"| start to ready (banner printed) | {start:.2f} s | `import boto3, moto.server` {baseline:.2f} s "
        f"| {start / baseline:.2f}x |",
        f"| job latency, submit -> SUCCEEDED | {latency:.2f} s | batching window {window} s "
        f"| {latency / window:.2f}x |",
    ]
    for runtime, (cpu, note) in idle.items():
        value = f"{cpu:.2f} s" if cpu is not None else f"not measured: {note}"
        share = f"{cpu / IDLE_SECONDS:.1%} of a core" if cpu is not None else "-"
        lines.append(
            f"| CPU at rest, `make dev RUNTIME={runtime}`, whole process tree, over {IDLE_SECONDS} s | {value} "
            f"| one core {IDLE_SECONDS} s | {share} |"
        )
    return [
        *lines,
        "",
        f"At rest: a fresh `make dev` per runtime, no requests and no jobs; the user + system CPU time of "
        f"`python -m devstack dev` and all its descendants (the Lambda runtime's sandboxed environments and "
        f"their extensions; exited ones through their parent's `cutime`/`cstime`), from `/proc/<pid>/stat`, "
        f"over {IDLE_SECONDS} s starting {SETTLE_SECONDS} s after the banner. The probe schedule is moved to "
        f"`{QUIET_PROBES}` for this run, so that the window holds no scheduled work (its default, "
        "rate(1 minute), would run the probe pipeline once in it).",
        "",
    ]


def idle_cpu_seconds(runtime: str) -> tuple[float | None, str]:
    """CPU seconds of a fresh `make dev RUNTIME=runtime` process tree over IDLE_SECONDS at rest."""
    process, _, line = start_make_dev("--runtime", runtime, "--build-dir", str(BUILD_DIR), "--parameter", QUIET_PROBES)
    try:
        assert process.stdout is not None
        if "local stack ready" not in line:
            return None, line.strip()
        # Drain the output meanwhile: a full pipe would block the stack's writes and stall it.
        threading.Thread(target=process.stdout.read, daemon=True).start()
        time.sleep(SETTLE_SECONDS)
        before = tree_cpu_seconds(process.pid)
        time.sleep(IDLE_SECONDS)
        return tree_cpu_seconds(process.pid) - before, ""
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=60)


def tree_cpu_seconds(root: int) -> float:
    """User + system CPU time of a process and all its descendants, live ones and reaped ones (Linux /proc)."""
    parents: dict[int, list[int]] = {}
    times: dict[int, int] = {}
    for pid, fields in procfs.all_stat_fields().items():
        parents.setdefault(int(fields[procfs.PPID]), []).append(pid)
        # utime, stime, and cutime, cstime: the children it has waited for (each counted once, by its parent)
        times[pid] = sum(int(fields[field]) for field in (procfs.UTIME, procfs.STIME, procfs.CUTIME, procfs.CSTIME))
    tree, ticks = [root], 0
    while tree:
        pid = tree.pop()
        ticks += times.get(pid, 0)
        tree.extend(parents.get(pid, []))
    return procfs.ticks_to_seconds(ticks)


def job_latency(port: int) -> float:
    endpoint = f"http://127.0.0.1:{port}"
    session = boto3.session.Session(aws_access_key_id="bench", aws_secret_access_key="bench", region_name="us-east-1")
    sqs, dynamodb = session.client("sqs", endpoint_url=endpoint), session.client("dynamodb", endpoint_url=endpoint)
    queue = sqs.get_queue_url(QueueName="mcp-backend-local-JobQueue")["QueueUrl"]
    job_id = f"bench-{uuid.uuid4().hex[:12]}"
    body = {
        "jobId": job_id,
        "userId": "user-e2e",
        "tool": "analyze_dataset",
        "input": {"dataset_url": "s3://local-datasets/user-e2e/sales.csv"},
    }
    started = time.perf_counter()
    sqs.send_message(QueueUrl=queue, MessageBody=json.dumps(body))
    while time.perf_counter() - started < 60:
        item = dynamodb.get_item(TableName="mcp-backend-local-JobTable", Key={"jobId": {"S": job_id}}).get("Item")
        if item and item["status"]["S"] == "SUCCEEDED":
            return time.perf_counter() - started
        time.sleep(0.05)
    raise TimeoutError(f"{job_id} did not succeed within 60 s")
