"""The local stack: `make dev` start to ready, and one job's latency through it (submit -> SUCCEEDED)."""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

import boto3

from devstack.template import load_template
from tests.bench.measure import RESULTS, ROOT, fresh_interpreter_seconds
from tests.e2e.conftest import free_port

STARTS = 3
JOBS = 3
IDLE_SECONDS = 60
SETTLE_SECONDS = 5


def run() -> list[str]:
    window = load_template().resource("ToolWorkerJobQueueMapping")["Properties"]["MaximumBatchingWindowInSeconds"]
    starts, latencies = [], []
    for attempt in range(STARTS):
        port = free_port()
        started = time.perf_counter()
        process = subprocess.Popen(
            [sys.executable, "-m", "devstack", "dev", "--port", str(port)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "PYTHONPATH": f"{ROOT / 'layers' / 'shared'}:{ROOT}"},
        )
        try:
            for line in process.stdout:
                if "local stack ready" in line:
                    starts.append(time.perf_counter() - started)
                    break
            if attempt == 0:
                idle_cpu = idle_cpu_seconds(process.pid)
                latencies = [job_latency(port) for _ in range(JOBS)]
        finally:
            process.send_signal(signal.SIGINT)
            process.wait(timeout=30)
    baseline = fresh_interpreter_seconds("import boto3, moto.server", 3)
    start, latency = statistics.median(starts), statistics.median(latencies)
    RESULTS["local_stack"] = {
        "start_s": start,
        "job_latency_s": latency,
        "batching_window_s": window,
        "idle_cpu_s": idle_cpu,
        "idle_s": IDLE_SECONDS,
    }
    return [
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
        f"| CPU used at rest (no requests, no jobs), over {IDLE_SECONDS} s | {idle_cpu:.2f} s | one core "
        f"{IDLE_SECONDS} s | {idle_cpu / IDLE_SECONDS:.1%} of a core |",
        "",
        f"At rest: the `make dev` process's user + system CPU time (all its threads, from `/proc/<pid>/stat`) "
        f"over {IDLE_SECONDS} s, measured {SETTLE_SECONDS} s after the banner, before any job is sent.",
        "",
    ]


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process, all its threads (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def idle_cpu_seconds(pid: int) -> float:
    time.sleep(SETTLE_SECONDS)
    before = process_cpu_seconds(pid)
    time.sleep(IDLE_SECONDS)
    return process_cpu_seconds(pid) - before


def job_latency(port: int) -> float:
    endpoint = f"http://127.0.0.1:{port}"
    session = boto3.session.Session(aws_access_key_id="bench", aws_secret_access_key="bench", region_name="us-east-1")
    sqs, dynamodb = session.client("sqs", endpoint_url=endpoint), session.client("dynamodb", endpoint_url=endpoint)
    queue = sqs.get_queue_url(QueueName="mcp-backend-local-JobQueue")["QueueUrl"]
    job_id = f"bench-{uuid.uuid4().hex[:12]}"
    body = {
        "jobId": job_id,
        "userId": "bench",
        "tool": "analyze_dataset",
        "input": {"dataset_url": "s3://local-datasets/sales.csv"},
    }
    started = time.perf_counter()
    sqs.send_message(QueueUrl=queue, MessageBody=json.dumps(body))
    while time.perf_counter() - started < 60:
        item = dynamodb.get_item(TableName="mcp-backend-local-JobTable", Key={"jobId": {"S": job_id}}).get("Item")
        if item and item["status"]["S"] == "SUCCEEDED":
            return time.perf_counter() - started
        time.sleep(0.05)
    raise TimeoutError(f"{job_id} did not succeed within 60 s")
