"""ToolWorker: cold import of its handler module, and per-record cost of batch + idempotency."""

from __future__ import annotations

import http.server
import json
import os
import statistics
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

import boto3
from moto import mock_aws

from devstack.runtime import procfs
from devstack.runtime.lambda_runtime import FunctionPool
from devstack.runtime.runtime_image import prepare_runtime_image
from tests.bench.measure import (
    RESULTS,
    DeployedPython,
    lambda_runtime_stack,
    per_item_seconds,
    timed_in_new_interpreter,
)

RUNS = 7
JOBS = 100
WRITES_PER_RECORD = 2  # DynamoDB write requests a job's record makes in the worker: claim, end


def run() -> list[str]:
    with mock_aws():
        from devstack.wired_stack import LocalEnvironment

        environment = LocalEnvironment(boto3.client)
        spec = environment.stack.function("ToolWorker")
    # A fresh interpreter of the deploy's runtime with the function's declared environment imports the built
    # app.py the way the runtime does: its code and layer on the module path, nothing of devstack or moto loaded.
    deployed = DeployedPython.prepare(environment.stack.template)
    worker_env = deployed.environment(
        deployed.build_dir / spec.logical_id, deployed.layer_ids(spec.layer_refs), **spec.environment
    )
    boto3_env = deployed.environment(None, [])
    imports, boto3_imports = [], []
    for _ in range(RUNS):  # alternating, so drift on a shared machine hits both
        boto3_imports.append(timed_in_new_interpreter(deployed.python, "import boto3", boto3_env))
        imports.append(timed_in_new_interpreter(deployed.python, "import app", worker_env))
    cold_import, baseline_boto3 = statistics.median(imports), statistics.median(boto3_imports)

    with mock_aws():
        from devstack.wired_stack import LocalEnvironment

        environment = LocalEnvironment(boto3.client)
        environment.seed_datasets()

        def batches() -> list[dict]:
            records = [_record(job) for job in _jobs()]
            return [{"Records": records[i : i + 10]} for i in range(0, len(records), 10)]

        def through_handler() -> None:
            for event in batches():
                response = environment.invoke("ToolWorker", event)
                assert not response["batchItemFailures"], response

        def bare_loop() -> None:
            for event in batches():
                for record in event["Records"]:
                    job = json.loads(record["body"])
                    tool(job["input"], services.context_for(tool, job["userId"]))

        # Warm: the handler imports the layer inside its own environment first (Powertools reads its
        # namespace and service from it when the module loads), then the bare loop uses the same modules.
        environment.invoke("ToolWorker", batches()[0])
        from mcp_backend.aws import AwsClients
        from mcp_backend.config import WorkerSettings, load_settings
        from mcp_backend.tools.services import ToolServices
        from mcp_backend.tools.table import TOOLS

        tool = TOOLS["analyze_dataset"]
        # The tool's context as the worker builds it (the deployment's dataset bucket and its fetch policy).
        worker_settings = load_settings(WorkerSettings, environment.stack.function("ToolWorker").environment)
        services = ToolServices.from_settings(worker_settings, AwsClients())
        handler_path = per_item_seconds(through_handler, JOBS)
        bare = per_item_seconds(bare_loop, JOBS)

    cores = sorted(os.sched_getaffinity(0))
    pinning = CorePinning(worker=frozenset(cores[-1:]), bench=frozenset(cores[:-1])) if len(cores) > 1 else None
    (moto,) = _batch_with_io_latency(aws_like=False)
    aws_like_variants = _batch_with_io_latency(aws_like=True, pinning=pinning)
    backends = {"moto": moto, "aws_like": aws_like_variants[0]}
    if pinning is not None:
        backends["aws_like_one_core"] = aws_like_variants[1]
    write_cpu = _sdk_cpu_per_dynamodb_write()
    RESULTS["worker_batch"] = {
        backend: {
            f"{size}_records": {
                "wall_ms_io": round(batch[(IO_LATENCY, size)].wall * 1000, 1),
                "wall_ms_no_io": round(batch[(0.0, size)].wall * 1000, 1),
                "function_cpu_ms_per_record": round(batch[(0.0, size)].cpu / size * 1000, 1),
            }
            for size in (1, 10)
        }
        for backend, batch in backends.items()
    }
    RESULTS["worker_batch"]["sdk_cpu_ms_per_dynamodb_write"] = round(write_cpu * 1000, 2)
    RESULTS["worker_batch"]["ratio_10_to_1"] = {backend: round(_ratio(batch), 2) for backend, batch in backends.items()}
    aws_like = backends["aws_like"]
    record_cpu = aws_like[(0.0, 10)].cpu / 10
    return [
        "## ToolWorker",
        "",
        f"Handler: `{spec.handler}` in `{spec.code_dir.relative_to(spec.code_dir.parents[1])}`; "
        f"{RUNS} fresh interpreters of the deploy's runtime (python3.13 with its boto3) per import figure, "
        f"importing the build output; {JOBS} `analyze_dataset` jobs on a 6-row CSV "
        "(moto S3, DynamoDB) in batches of 10, median of 3 passes.",
        "",
        "| measure | value | baseline | ratio |",
        "|---|---|---|---|",
        f"| cold import of the worker handler module | {cold_import * 1000:.0f} ms | `import boto3` "
        f"{baseline_boto3 * 1000:.0f} ms | {cold_import / baseline_boto3:.2f}x |",
        f"| per record, handler (Batch + Idempotency + JobTable + tool) | {handler_path * 1000:.2f} ms | "
        f"bare loop over the tool {bare * 1000:.2f} ms | {handler_path / bare:.2f}x |",
        "",
        f"The handler path adds per record its {WRITES_PER_RECORD} JobTable writes (the claim, RUNNING, and the "
        "end, SUCCEEDED: the job item is the idempotency record), and "
        "the parse. With moto these are in-process calls; on AWS each is a DynamoDB round trip (single-digit ms), "
        "so the ratio here is a floor.",
        "",
        f"Records of a batch run at once: each job reads its dataset from a loopback server that answers after "
        f"{IO_LATENCY * 1000:.0f} ms (injected I/O latency), or at once; a batch of 1 against a batch of 10 through "
        "the handler, the build output in the local Lambda runtime (its own process), warm, median of "
        f"{LATENCY_PASSES} passes each; the template's `WorkerRecordConcurrency` (10). Two backends for the "
        "worker's DynamoDB and Kinesis calls: the local stack's moto server, and an AWS-like stand-in that "
        f"answers every call after {AWS_CALL_LATENCY * 1000:.0f} ms, overlapping, and accepts every write "
        "(DynamoDB's documented single-digit milliseconds; `_AwsLikeBackend` in `tests/bench/worker.py`, reached "
        "through the SDK's `AWS_ENDPOINT_URL_DYNAMODB` / `_KINESIS` variables). Function CPU: the CPU time "
        "the runtime process's threads ran during the batch (`/proc/<pid>/task/<tid>/schedstat`, in ns; its "
        "extension's excluded).",
        "",
        "| backend | batch | wall time, 100 ms I/O | wall time, no injected I/O | I/O the batch waited | "
        "function CPU per record |",
        "|---|---|---|---|---|---|",
        *(
            f"| {BACKEND_LABELS[backend]} | "
            f"{size} record{'s' if size > 1 else ''} | {batch[(IO_LATENCY, size)].wall * 1000:.0f} ms | "
            f"{batch[(0.0, size)].wall * 1000:.0f} ms | "
            f"{(batch[(IO_LATENCY, size)].wall - batch[(0.0, size)].wall) * 1000:.0f} ms | "
            f"{batch[(0.0, size)].cpu / size * 1000:.1f} ms |"
            for backend, batch in backends.items()
            for size in (1, 10)
        ),
        "",
        f"Ratio, 10 records to 1 with 100 ms I/O each: {_ratio(aws_like):.2f}x against the AWS-like backend "
        f"on the shared machine (target at most 1.3x), {_ratio(backends['moto']):.2f}x against moto. One after "
        "another, 10 records would wait 1000 ms of I/O; they wait about one record's. What does not overlap is "
        "each record's own Python work under the GIL (the function CPU column: botocore building and signing the "
        "DynamoDB writes, Powertools idempotency, the tool, the log lines), and, against moto, moto's own work, "
        "served by one process on the same two cores. On Lambda the function's CPU share grows with its memory "
        '(README, "The job pipeline"), so that column is the one to watch when raising '
        "`WorkerRecordConcurrency`.",
        "",
        *_one_core_lines(backends.get("aws_like_one_core"), pinning),
        f"Of that CPU, the SDK's own work for one DynamoDB write is {write_cpu * 1000:.2f} ms here "
        f"({SDK_WRITES} `UpdateItem` calls to the AWS-like stand-in from the runtime's python3.13 and boto3, in "
        f"their own process, after {SDK_WARM_WRITES} to warm up): the {WRITES_PER_RECORD} writes a record makes "
        f"are {WRITES_PER_RECORD * write_cpu * 1000:.1f} ms of the {record_cpu * 1000:.1f} ms a record costs in a "
        "batch of 10. The "
        "records' I/O overlaps, their CPU does not: every ms a record's CPU loses takes 10 ms off the batch and "
        "1 ms off a single record (and every ms it gains adds as much), so on the shared machine the ratio is "
        f"1.3x at a record's CPU of about {_cpu_for_target(aws_like) * 1000:.1f} ms, against "
        f"{record_cpu * 1000:.1f} ms now (a linear estimate from the figures above). Where a record's CPU goes: "
        "`python -m tests.bench.profile_worker` (cProfile of the built handler in the deploy's runtime, against "
        "the AWS-like stand-in).",
        "",
    ]


BACKEND_LABELS = {
    "moto": "moto server",
    "aws_like": "AWS-like, 5 ms a call",
    "aws_like_one_core": "AWS-like, worker alone on one core",
}


@dataclass(frozen=True)
class CorePinning:
    """The worker's execution environment on `worker` (every process and thread of it, set when it starts),
    everything else the bench runs (its client, the AWS-like backend, the dataset server, the local stack's
    servers) on `bench`."""

    worker: frozenset[int]
    bench: frozenset[int]


def _one_core_lines(batch: dict[tuple[float, int], BatchTiming] | None, pinning: CorePinning | None) -> list[str]:
    if batch is None or pinning is None:
        return ["The worker alone on one core: not measured (this machine offers the bench one CPU).", ""]
    return [
        f'The worker alone on one core, the CPU share Lambda gives a function at 1,769 MB ("At 1,769 MB, a '
        'function has the equivalent of one vCPU (one vCPU-second of credits per second)", [Configure Lambda '
        "function memory](https://docs.aws.amazon.com/lambda/latest/dg/configuration-memory.html)): "
        f"{_ratio(batch):.2f}x against the AWS-like backend. Method: a second stack whose worker's execution "
        f"environment is started under `taskset --cpu-list {','.join(map(str, sorted(pinning.worker)))}` (the "
        "Lambda runtime's `FunctionPool.cpus`: set before its first process runs, so the runtime, its extensions "
        "and every thread they start inherit it), measured in the same passes as the shared one, each pass "
        "running the shared worker, then the pinned one with every thread of the bench process (client, "
        "AWS-like backend, dataset server, the local stacks' servers) moved to CPU "
        f"{','.join(map(str, sorted(pinning.bench)))}, so load that comes and goes hits both; after each pinned "
        "pass the bench reads `Cpus_allowed_list` of every thread of every process of the environment "
        "(`/proc/<pid>/task/<tid>/status`) and of the bench process, and stops if one is not pinned. "
        "Nothing else this bench runs shares the worker's core; other work on the machine still may.",
        "",
    ]


def _pin_threads(pid: int, cpus: frozenset[int]) -> None:
    """Every thread of `pid` now on `cpus` (sched_setaffinity(2) sets one thread's, by tid); threads they
    start later inherit it."""
    for tid in procfs.allowed_cpus_by_thread(pid):
        try:
            os.sched_setaffinity(tid, cpus)
        except ProcessLookupError:
            pass  # the thread ended meanwhile


def _check_pinned(pid: int, cpus: frozenset[int], what: str) -> int:
    """The number of threads of `pid`, each checked to run only on `cpus`."""
    expected = ",".join(map(str, sorted(cpus)))
    allowed = procfs.allowed_cpus_by_thread(pid)
    wrong = {tid: cpu_list for tid, cpu_list in allowed.items() if cpu_list != expected}
    if not allowed or wrong:
        raise RuntimeError(f"{what} (pid {pid}) not pinned to CPU {expected}: {wrong or 'no threads'}")
    return len(allowed)


def _runtime_cpu_ns(pool: FunctionPool) -> dict[tuple[int, int], int]:
    """CPU time of every thread of the function's runtime processes (its extensions' excluded), in ns."""
    return {
        (env.process.pid, tid): ns
        for env in pool.environments()
        if env.process is not None
        for tid, ns in procfs.thread_cpu_ns(env.process.pid).items()
    }


def _cpu_seconds_since(before: dict[tuple[int, int], int], after: dict[tuple[int, int], int]) -> float:
    """What the threads ran between the two readings (a thread started in between counts whole; one that
    ended in between is missed: the runtime's record threads live as long as the environment)."""
    return sum(ns - before.get(thread, 0) for thread, ns in after.items()) / 1e9


def _cpu_for_target(batch: dict[tuple[float, int], BatchTiming], target: float = 1.3) -> float:
    """The CPU a record may cost for the batch ratio to be `target`, if nothing else changed: the batch of 10
    loses (or gains) 10 times what one record does. Above the record's CPU now when the ratio is under it."""
    one, ten = batch[(IO_LATENCY, 1)].wall, batch[(IO_LATENCY, 10)].wall
    return batch[(0.0, 10)].cpu / 10 - (ten - target * one) / (10 - target)


def _ratio(batch: dict[tuple[float, int], BatchTiming]) -> float:
    return batch[(IO_LATENCY, 10)].wall / batch[(IO_LATENCY, 1)].wall


IO_LATENCY = 0.1
LATENCY_PASSES = 15


class _SlowDataset(http.server.BaseHTTPRequestHandler):
    """A loopback dataset server that waits IO_LATENCY before answering: the tool's injected I/O latency."""

    CSV = b"region,amount\nnorth,1\nsouth,2\n"
    disable_nagle_algorithm = True  # as _AwsLikeBackend

    latency = IO_LATENCY

    def do_GET(self) -> None:
        time.sleep(_SlowDataset.latency)
        self.send_response(200)
        self.send_header("content-type", "text/csv")
        self.send_header("content-length", str(len(self.CSV)))
        self.end_headers()
        self.wfile.write(self.CSV)

    def log_message(self, *args: Any) -> None:
        pass


AWS_CALL_LATENCY = 0.005
_ACCEPTED_WRITES = {"PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems"}


class _AwsLikeBackend(http.server.BaseHTTPRequestHandler):
    """DynamoDB and Kinesis as the worker meets them on AWS, for the worker's own cost: every call is
    answered after AWS_CALL_LATENCY, a network wait that calls on other threads overlap, and every write
    succeeds. It stores nothing and checks nothing: it measures the worker, not a database. 5 ms is inside
    DynamoDB's "single-digit millisecond" (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/
    Introduction.html); the worker reaches it through the SDKs' service-specific endpoint variables
    (AWS_ENDPOINT_URL_<SERVICE>, https://docs.aws.amazon.com/sdkref/latest/guide/feature-ss-endpoints.html)."""

    protocol_version = "HTTP/1.1"  # keep-alive, as botocore's pool expects
    # Headers and body are two writes: with Nagle on, the body waits for the client's delayed ACK (~40 ms).
    disable_nagle_algorithm = True

    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
        time.sleep(AWS_CALL_LATENCY)
        service, _, operation = (self.headers.get("x-amz-target") or "").partition(".")
        if service.startswith("DynamoDB") and operation in _ACCEPTED_WRITES:
            self._answer({}, "application/x-amz-json-1.0")
        elif service.startswith("DynamoDB") and operation == "GetItem":  # a cancellation check: no such job
            self._answer({}, "application/x-amz-json-1.0")
        elif service.startswith("Kinesis") and operation == "PutRecords":
            records = [{"SequenceNumber": "1", "ShardId": "shardId-000000000000"} for _ in request["Records"]]
            self._answer({"FailedRecordCount": 0, "Records": records}, "application/x-amz-json-1.1")
        else:  # a call this bench did not expect: fail the record loudly rather than guess an answer
            self._answer({"__type": "UnknownOperationException", "message": operation}, "application/json", 400)

    def _answer(self, body: dict, content_type: str, status: int = 200) -> None:
        payload = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: Any) -> None:
        pass


def _serve(handler: type[http.server.BaseHTTPRequestHandler]) -> http.server.ThreadingHTTPServer:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@dataclass(frozen=True)
class BatchTiming:
    wall: float  # seconds, median
    cpu: float  # the function's CPU seconds, median


Timings = dict[tuple[float, int], BatchTiming]


def _batch_with_io_latency(aws_like: bool, pinning: CorePinning | None = None) -> list[Timings]:
    """Median wall time of a batch of 1 and of 10 jobs, each reading a dataset that answers after IO_LATENCY,
    and after no delay (what the records cost besides the injected I/O).

    The worker runs as deployed: the build output in the local Lambda runtime, in its own process. Its
    DynamoDB and Kinesis calls go to the stack's moto server, or with `aws_like` to _AwsLikeBackend. With
    `pinning`, a second stack's worker runs alone on its CPUs, measured in the same passes (each pass runs the
    shared one, then the pinned one with this process on the other CPUs), so load that comes and goes on a
    shared machine hits both: its timings come second."""
    unpinned = frozenset(os.sched_getaffinity(0))
    try:
        return _measure_batches(aws_like, [None] if pinning is None else [None, pinning], unpinned)
    finally:
        _pin_threads(os.getpid(), unpinned)


def _measure_batches(aws_like: bool, variants: list[CorePinning | None], unpinned: frozenset[int]) -> list[Timings]:
    server = _serve(_SlowDataset)
    url = f"http://127.0.0.1:{server.server_address[1]}/sales.csv"
    backend = _serve(_AwsLikeBackend) if aws_like else None
    endpoint = f"http://127.0.0.1:{backend.server_address[1]}" if backend else ""
    stacks = []
    try:
        for pinning in variants:
            stacks.append(
                lambda_runtime_stack(
                    {"AWS_ENDPOINT_URL_DYNAMODB": endpoint, "AWS_ENDPOINT_URL_KINESIS": endpoint} if backend else None
                )
            )
            assert stacks[-1].environment.lambda_runtime is not None
            stacks[-1].environment.lambda_runtime.pool("ToolWorker").cpus = pinning.worker if pinning else None
        pools = [
            stack.environment.lambda_runtime.pool("ToolWorker") for stack in stacks if stack.environment.lambda_runtime
        ]
        timings: list[dict[tuple[float, int], list[tuple[float, float]]]] = [
            {(latency, size): [] for latency in (IO_LATENCY, 0.0) for size in (1, 10)} for _ in variants
        ]
        for attempt in range(LATENCY_PASSES + 1):
            for pinning, pool, samples in zip(variants, pools, timings, strict=True):
                # This process's threads (client, servers) off the pinned worker's CPU, or anywhere.
                _pin_threads(os.getpid(), pinning.bench if pinning else unpinned)
                for latency, size in samples:
                    _SlowDataset.latency = latency
                    jobs = [{**job, "input": {"dataset_url": url}} for job in _jobs()[:size]]
                    event = {"Records": [_record(job) for job in jobs]}
                    cpu_before, started = _runtime_cpu_ns(pool), time.perf_counter()
                    response = pool.invoke(event)
                    wall = time.perf_counter() - started
                    if attempt:  # the first pass warms the environment (cold start, first clients)
                        samples[(latency, size)].append((wall, _cpu_seconds_since(cpu_before, _runtime_cpu_ns(pool))))
                    assert not response["batchItemFailures"], response
                if pinning is not None:  # after each pass: threads the batches started are checked too
                    _check_all_pinned(pool, pinning)
    finally:
        # Last started, first stopped: each stack restores the process environment it found when it started.
        for stack in reversed(stacks):
            stack.stop()
        server.shutdown()
        if backend:
            backend.shutdown()
    return [
        {
            key: BatchTiming(
                statistics.median(wall for wall, _ in samples), statistics.median(cpu for _, cpu in samples)
            )
            for key, samples in variant.items()
        }
        for variant in timings
    ]


def _check_all_pinned(pool: FunctionPool, pinning: CorePinning) -> None:
    for env in pool.environments():
        assert env.process is not None
        for pid in procfs.group_states(env.process.pid):
            _check_pinned(pid, pinning.worker, "the worker's execution environment")
    _check_pinned(os.getpid(), pinning.bench, "the bench process")


SDK_WRITES = 300
SDK_WARM_WRITES = 30
# One process, the runtime's interpreter and SDK, nothing else: the CPU an UpdateItem costs its caller.
_SDK_WRITE_LOOP = """
import sys, time
import boto3
client = boto3.client("dynamodb", endpoint_url=sys.argv[1], region_name="us-east-1",
                      aws_access_key_id="bench", aws_secret_access_key="bench")
def write():
    client.update_item(TableName="bench", Key={"jobId": {"S": "bench"}}, UpdateExpression="SET #s = :s",
                       ConditionExpression="attribute_not_exists(jobId) OR userId = :user",
                       ExpressionAttributeNames={"#s": "status"},
                       ExpressionAttributeValues={":s": {"S": "RUNNING"}, ":user": {"S": "bench"}})
for _ in range(int(sys.argv[2])):
    write()
started = time.process_time()
for _ in range(int(sys.argv[3])):
    write()
print((time.process_time() - started) / int(sys.argv[3]))
"""


def _sdk_cpu_per_dynamodb_write() -> float:
    """CPU seconds the runtime's boto3 spends on one DynamoDB UpdateItem (the answer is _AwsLikeBackend's)."""
    image = prepare_runtime_image()
    backend = _serve(_AwsLikeBackend)
    try:
        result = subprocess.run(
            [
                str(image.python),
                "-c",
                _SDK_WRITE_LOOP,
                f"http://127.0.0.1:{backend.server_address[1]}",
                str(SDK_WARM_WRITES),
                str(SDK_WRITES),
            ],
            env={**os.environ, "PYTHONPATH": str(image.provided_packages)},
            capture_output=True,
            text=True,
            check=True,
        )
    finally:
        backend.shutdown()
    return float(result.stdout.strip())


def _jobs() -> list[dict]:
    return [
        {
            "jobId": f"bench-{uuid.uuid4().hex[:16]}",
            "userId": "user-e2e",
            "tool": "analyze_dataset",
            "input": {"dataset_url": "s3://local-datasets/user-e2e/sales.csv"},
        }
        for _ in range(JOBS)
    ]


def _record(job: dict) -> dict:
    body = json.dumps(job)
    message_id = str(uuid.uuid4())
    return {
        "messageId": message_id,
        "receiptHandle": message_id,
        "body": body,
        "attributes": {
            "ApproximateReceiveCount": "1",
            "SentTimestamp": "1764417600000",
            "SenderId": "bench",
            "ApproximateFirstReceiveTimestamp": "1764417600000",
        },
        "messageAttributes": {},
        "md5OfBody": "",
        "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:bench",
        "awsRegion": "us-east-1",
    }
