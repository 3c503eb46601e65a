"""The Lambda runtime of the local stack: cold starts from the build output (with and without the
layer's precompiled .pyc), warm invocation overhead against the in-process runtime, and a queue
drained by one environment against several."""

from __future__ import annotations

import dataclasses
import io
import json
import shutil
import statistics
import tempfile
import threading
import time
import uuid
from pathlib import Path

from devstack.runtime import procfs
from devstack.runtime.execution_environment import LambdaFunction
from devstack.runtime.in_process import FunctionRuntime
from devstack.runtime.lambda_runtime import FunctionPool, LambdaRuntime
from devstack.server import DevStack
from devstack.stack.resources import FunctionSpec
from tests.bench.functions import (
    OPTIONAL_PARTS,
    PREVIOUS_RELEASE,
    PREVIOUS_RELEASE_ENVIRONMENT,
    previous_release,
)
from tests.bench.measure import ROOT, lambda_runtime_stack, load_average
from tests.e2e.conftest import BUILD_DIR

COLD_STARTS = 3
EXTENSION_RUNS = 5
WARM_CALLS = 200
JOBS = 80
PROBES = ROOT / "tests" / "e2e" / "lambda_functions"


def run() -> list[str]:
    stack = lambda_runtime_stack()
    try:
        runtime = stack.environment.lambda_runtime
        assert runtime is not None
        with tempfile.TemporaryDirectory() as scratch:
            loads = (load_average(), "")
            cold = cold_starts(runtime, Path(scratch))
            cold.update(optional_cold_starts(set(cold), Path(scratch)))
            loads = (loads[0], load_average())
        warm_lambda, warm_inprocess = warm_overhead(runtime)
        extension = extension_cost(stack, runtime)
        snapstart_init, snapstart_hooks = snapstart_restore_path(runtime)
        drained = {n: drain_seconds(stack, runtime, n) for n in (1, 4)}
    finally:
        stack.stop()
    lines = [
        "## Lambda runtime (make dev RUNTIME=lambda, make test's end-to-end suite)",
        "",
        f"Build output `{BUILD_DIR.relative_to(ROOT) if BUILD_DIR.is_relative_to(ROOT) else BUILD_DIR}`, one sandbox "
        f"per execution environment (user + mount namespaces), AWS's Runtime Interface Client. Cold start: "
        f"process start to the runtime's first `invocation/next` (McpServer: to the web adapter's readiness "
        f"check answering), median of {COLD_STARTS}, each in a new environment; the layer read-only in both "
        "columns, once as built (`.pyc` precompiled for python3.13) and once with every `__pycache__` removed. "
        f"Previous release: commit `{PREVIOUS_RELEASE[:7]}`'s handler and shared package (.pyc precompiled) on "
        "the same built dependencies and environment, alternating with the other two in the same run (`-`: no "
        "such function then). Functions of parts off by default "
        f"({', '.join(f'{k}={v}' for k, v in OPTIONAL_PARTS.items())}) from a stack of their own with those "
        "parts on. Absolute cold starts on this shared two-core machine vary between runs; read the "
        f"ratios. Load average (1, 5, 15 min) when the cold starts began: {loads[0]}; when they ended: {loads[1]}.",
        "",
        "| function | cold start, no .pyc | cold start, .pyc precompiled | ratio | previous release, .pyc "
        "| now / previous |",
        "|---|---|---|---|---|---|",
    ]
    for logical_id, (plain, compiled, before) in sorted(cold.items()):
        against = f"{before:.0f} ms | {compiled / before:.2f}x" if before else "- | -"
        lines.append(f"| {logical_id} | {plain:.0f} ms | {compiled:.0f} ms | {compiled / plain:.2f}x | {against} |")
    lines += extension_lines(extension)
    lines += [
        "",
        f"McpServer with SnapStart (`McpServerSnapStart=PublishedVersions`), median of {COLD_STARTS} new "
        "environments: the restore path the Web Adapter adds after a restore (the app's after-restore hook, then "
        "the readiness check again) against the environment's init. Lambda's own restore of the snapshot has no "
        "local equivalent: on Lambda, compare a restored environment's REPORT `Restore Duration` with a cold one's "
        "`Init Duration`.",
        "",
        "| measure | value | baseline | ratio |",
        "|---|---|---|---|",
        f"| after-restore hook + readiness check | {snapstart_hooks:.0f} ms | init {snapstart_init:.0f} ms "
        f"| {snapstart_hooks / snapstart_init:.3f}x |",
    ]
    lines += [
        "",
        f"Warm invocation: a handler that returns at once (`tests/e2e/lambda_functions/probe.py`), "
        f"{WARM_CALLS} sequential invocations of one warm environment; baseline the same handler in the "
        "in-process runtime. The difference is the Runtime API round trip (next, response) and JSON.",
        "",
        "| measure | value | baseline | ratio |",
        "|---|---|---|---|",
        f"| warm invocation, Lambda runtime | {warm_lambda * 1000:.2f} ms | in-process {warm_inprocess * 1000:.2f} ms "
        f"| {warm_lambda / warm_inprocess:.1f}x |",
        f"| {JOBS} `analyze_dataset` jobs drained from JobQueue, 4 concurrent batches (4 environments) "
        f"| {drained[4]:.2f} s | 1 batch at a time {drained[1]:.2f} s | {drained[1] / drained[4]:.2f}x faster |",
        "",
        "Draining: ToolWorker's environments warm before the clock starts; each concurrent batch is its own "
        "poller and environment, as with an SQS mapping's `ScalingConfig.MaximumConcurrency`. The moto server "
        "doing the S3, DynamoDB and SQS work runs on the same two cores, so the speed-up is bounded by them.",
        "",
    ]
    return lines


def cold_starts(runtime: LambdaRuntime, scratch: Path) -> dict[str, tuple[float, float, float | None]]:
    """Per function, the median init without .pyc, as built, and of the previous release's handler and shared
    package (.pyc precompiled) on the same built dependencies and environment (None: that release had no such
    function), the three alternating."""
    layer, mcp_layer = BUILD_DIR / "SharedLayer", BUILD_DIR / "McpLayer"
    plain = scratch / "SharedLayer"
    shutil.copytree(layer, plain, ignore=shutil.ignore_patterns("__pycache__"))
    # McpLayer carries mcp_backend's endpoint-only parts (layers/shared/Makefile): without .pyc in the plain
    # variant, and left out of the previous release's, whose core layer holds its whole mcp_backend.
    plain_mcp, released_mcp = scratch / "McpLayer", scratch / "McpLayer-previous-release"
    shutil.copytree(mcp_layer, plain_mcp)
    for folder in (plain_mcp / "python" / "mcp_backend").rglob("__pycache__"):
        shutil.rmtree(folder)
    shutil.copytree(mcp_layer, released_mcp, ignore=shutil.ignore_patterns("mcp_backend"))
    release = previous_release(Path(runtime.image.python))
    released_layer = scratch / "SharedLayer-previous-release"
    shutil.copytree(layer, released_layer, ignore=shutil.ignore_patterns("mcp_backend"))
    shutil.copytree(release / "layers" / "shared" / "mcp_backend", released_layer / "python" / "mcp_backend")
    results = {}
    for logical_id, function in runtime.functions.items():
        variants: list[LambdaFunction | None] = []
        for variant in ({layer: plain, mcp_layer: plain_mcp}, {}):
            layers = tuple(variant.get(path, path) for path in function.layer_dirs)
            variants.append(dataclasses.replace(function, layer_dirs=layers))
        variants.append(
            _previous_release_function(function, release, {layer: released_layer, mcp_layer: released_mcp}, scratch)
        )
        samples: list[list[float]] = [[], [], []]
        for _ in range(COLD_STARTS):
            for index, variant_function in enumerate(variants):
                if variant_function is None:
                    continue
                pool = FunctionPool(variant_function, runtime.image, io.StringIO())
                with pool.environment() as env:
                    samples[index].append(env.init_duration_ms or 0.0)
                _stop(pool)
        medians = [statistics.median(figures) if figures else None for figures in samples]
        assert medians[0] is not None and medians[1] is not None
        results[logical_id] = (medians[0], medians[1], medians[2])
    return results


def optional_cold_starts(measured: set[str], scratch: Path) -> dict[str, tuple[float, float, float | None]]:
    """The cold starts of the functions only a part that is off by default brings (OPTIONAL_PARTS), from a
    stack of their own with those parts on; the rest of this section keeps to the defaults."""
    stack = lambda_runtime_stack(parameters=OPTIONAL_PARTS)
    try:
        runtime = stack.environment.lambda_runtime
        assert runtime is not None
        for logical_id in measured & set(runtime.functions):
            del runtime.functions[logical_id]
        return cold_starts(runtime, scratch / "optional")
    finally:
        stack.stop()


def _previous_release_function(
    function: LambdaFunction, release: Path, released_layers: dict[Path, Path], scratch: Path
) -> LambdaFunction | None:
    """`function` with the previous release's handler folder (over its built one) and shared package (each built
    layer replaced as `released_layers` says), or None."""
    code = release / function.spec.code_dir.relative_to(ROOT)
    if not code.is_dir():
        return None
    task = scratch / f"task-{function.spec.logical_id}"
    shutil.copytree(function.task_dir, task, ignore=shutil.ignore_patterns(*(item.name for item in code.iterdir())))
    shutil.copytree(code, task, dirs_exist_ok=True)
    return dataclasses.replace(
        function,
        task_dir=task,
        layer_dirs=tuple(released_layers.get(path, path) for path in function.layer_dirs),
        environment={**PREVIOUS_RELEASE_ENVIRONMENT, **function.environment},
    )


@dataclasses.dataclass
class ExtensionCost:
    """Medians, ms, with the extension's layer and without: cold starts (init) of the probe function and of
    ToolWorker, the probe's first invocation (init included); the extension's peak memory, MB."""

    probe_init: tuple[float, float]
    worker_init: tuple[float, float]
    probe_first_call: tuple[float, float]
    cpu_to_first_event_ms: float
    memory_before_records_mb: int
    memory_after_records_mb: int


def extension_cost(stack: DevStack, runtime: LambdaRuntime) -> ExtensionCost:
    """The call-log-telemetry extension's cost, each figure alternating with and without its layer so that drift
    on a shared machine hits both. Its records go to the stack's CallLogStream (loopback)."""
    telemetry = BUILD_DIR / "TelemetryExtensionLayer"
    variables = {
        "AWS_ENDPOINT_URL": stack.aws_url,
        "CALL_LOG_STREAM_NAME": stack.environment.table_name("CallLogStream"),
    }
    spec = _probe_spec(variables)
    probe = LambdaFunction(spec, PROBES, (BUILD_DIR / "SharedLayer", telemetry), 1, "us-east-1", spec.environment)
    worker = runtime.functions["ToolWorker"]
    assert telemetry in worker.layer_dirs, "ToolWorker carries the extension's layer (template.yaml)"
    samples: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in ("probe", "worker", "call")}
    before, after, cpu = 0, 0, []
    for _ in range(EXTENSION_RUNS):
        for column, carried in enumerate((True, False)):
            layers = {"probe": probe.layer_dirs, "worker": worker.layer_dirs}
            if not carried:
                layers = {name: tuple(d for d in dirs if d != telemetry) for name, dirs in layers.items()}
            probe_ms, probe_mb, probe_cpu = _cold_start(dataclasses.replace(probe, layer_dirs=layers["probe"]), runtime)
            samples["probe"][column].append(probe_ms)
            samples["worker"][column].append(
                _cold_start(dataclasses.replace(worker, layer_dirs=layers["worker"]), runtime)[0]
            )
            call_ms, call_mb = _first_call(dataclasses.replace(probe, layer_dirs=layers["probe"]), runtime)
            samples["call"][column].append(call_ms)
            if carried:
                before, after = max(before, probe_mb), max(after, call_mb)
                cpu.append(probe_cpu)
    medians = {name: (statistics.median(w), statistics.median(wo)) for name, (w, wo) in samples.items()}
    return ExtensionCost(medians["probe"], medians["worker"], medians["call"], statistics.median(cpu), before, after)


def snapstart_restore_path(runtime: LambdaRuntime, samples: int = COLD_STARTS) -> tuple[float, float]:
    """Medians, ms: McpServer's init, and the restore path the local runtime runs after it with SnapStart on (the
    Web Adapter's after-restore hook and readiness check; devstack.runtime.adapter_readiness)."""
    function = runtime.functions["McpServer"]
    snapshotted = dataclasses.replace(
        function,
        spec=dataclasses.replace(function.spec, snap_start=True),
        environment={**function.environment, "AWS_LWA_SNAPSTART_AFTER_RESTORE_PATH": "/_lwa/after-restore"},
    )
    inits, restores = [], []
    for _ in range(samples):
        pool = FunctionPool(snapshotted, runtime.image, io.StringIO())
        with pool.environment() as env:
            inits.append(env.init_duration_ms or 0.0)
            restores.append(env.restore_duration_ms or 0.0)
        _stop(pool)
    return statistics.median(inits), statistics.median(restores)


def _cold_start(function: LambdaFunction, runtime: LambdaRuntime) -> tuple[float, int, float]:
    """(init ms, the extensions' peak memory MB and their CPU ms at the end of init) of a new environment."""
    pool = FunctionPool(function, runtime.image, io.StringIO())
    with pool.environment() as env:
        assert env.process is not None
        others = [pid for pid in procfs.group_states(env.process.pid) if pid != env.process.pid]
        cpu_ms = 1000 * sum(procfs.cpu_seconds(pid) or 0.0 for pid in others)
        figures = env.init_duration_ms or 0.0, env.extension_memory_mb(), cpu_ms
    _stop(pool)
    return figures


def _first_call(function: LambdaFunction, runtime: LambdaRuntime) -> tuple[float, int]:
    """(ms from a new environment to its first invocation's answer, the extensions' peak memory MB once that
    invocation's report has been shipped)."""
    pool = FunctionPool(function, runtime.image, io.StringIO())
    started = time.perf_counter()
    pool.invoke({})
    elapsed = (time.perf_counter() - started) * 1000
    time.sleep(1.5)  # the report delivered (100 ms buffering) and shipped (the shipper's 1 s interval)
    memory = max(env.extension_memory_mb() for env in pool.environments())
    _stop(pool)
    return elapsed, memory


def extension_lines(cost: ExtensionCost) -> list[str]:
    rows = [
        ("probe function: cold start (init)", cost.probe_init),
        ("ToolWorker: cold start (init)", cost.worker_init),
        ("probe function: first invocation, init included", cost.probe_first_call),
    ]
    return [
        "",
        "The call-log-telemetry extension (`/opt/extensions/call-log-telemetry`, TelemetryExtensionLayer, on "
        "McpServer and ToolWorker only): cold starts with and without its layer, a probe function "
        f"(`tests/e2e/lambda_functions/probe.py`) and ToolWorker, median of {EXTENSION_RUNS} each, alternating. Init "
        "ends when the runtime and every extension wait for their next event, so the extension's start is on the "
        "cold-start path; the call-log code (pydantic, Powertools, boto3) loads only once the first invocation's "
        "runtime is done, before the extension asks for its next event, which the first invocation's row shows "
        "(the local runtime answers an invocation once every extension is back in `event/next`; Lambda answers "
        "the caller when the runtime does). Memory: the extension process's peak resident memory, on top of the "
        "function's, at the end of init and after its first records are shipped. CPU time: the extension process's "
        "own, from `/proc` (what it takes from the function's init when the CPU is the bottleneck; the wall-clock "
        "difference on this shared machine also counts waiting for a core).",
        "",
        "| measure | with the extension | without | difference |",
        "|---|---|---|---|",
        *(f"| {label} | {w:.0f} ms | {wo:.0f} ms | {w - wo:+.0f} ms |" for label, (w, wo) in rows),
        f"| extension CPU (user + system) by the end of init, probe | {cost.cpu_to_first_event_ms:.0f} ms | | |",
        f"| extension memory (peak RSS), before its first records | {cost.memory_before_records_mb} MB | | |",
        f"| extension memory (peak RSS), after its first records | {cost.memory_after_records_mb} MB | | |",
    ]


def _probe_spec(environment: dict[str, str]) -> FunctionSpec:
    return FunctionSpec(
        logical_id="Probe",
        name="bench-Probe",
        arn="arn:aws:lambda:us-east-1:123456789012:function:bench-Probe",
        handler="probe.identity",
        code_dir=PROBES,
        layer_dirs=(),
        timeout=10,
        memory_size=128,
        environment=environment,
    )


def warm_overhead(runtime: LambdaRuntime) -> tuple[float, float]:
    spec = _probe_spec({"AWS_LAMBDA_LOG_STREAM_NAME": "bench"})
    pool = FunctionPool(LambdaFunction(spec, PROBES, (), 1, "us-east-1", {}), runtime.image, io.StringIO())
    pool.invoke({})  # cold start outside the measure
    started = time.perf_counter()
    for _ in range(WARM_CALLS):
        pool.invoke({})
    in_lambda = (time.perf_counter() - started) / WARM_CALLS
    _stop(pool)
    local = FunctionRuntime(spec, "us-east-1")
    local.invoke({})
    started = time.perf_counter()
    for _ in range(WARM_CALLS):
        local.invoke({})
    return in_lambda, (time.perf_counter() - started) / WARM_CALLS


def drain_seconds(stack: DevStack, runtime: LambdaRuntime, concurrency: int) -> float:
    """Seconds to run JOBS queued jobs with `concurrency` pollers and environments."""
    worker = runtime.functions["ToolWorker"]
    pool = FunctionPool(dataclasses.replace(worker, concurrency=concurrency), runtime.image, io.StringIO())
    holders = [pool.environment() for _ in range(concurrency)]
    warm = [threading.Thread(target=holder.__enter__) for holder in holders]
    for thread in warm:
        thread.start()
    for thread in warm:
        thread.join()
    for holder in holders:
        holder.__exit__(None, None, None)
    source = stack.environment.sqs_source_for("ToolWorker")
    original = source.invoke
    source.invoke = pool.invoke
    sqs, queue = stack.client("sqs"), stack.environment.queue_url("JobQueue")
    for _ in range(JOBS // 10):
        sqs.send_message_batch(
            QueueUrl=queue,
            Entries=[
                {
                    "Id": str(n),
                    "MessageBody": json.dumps(
                        {
                            "jobId": f"bench-{uuid.uuid4().hex[:12]}",
                            "userId": "user-e2e",
                            "tool": "analyze_dataset",
                            "input": {"dataset_url": "s3://local-datasets/user-e2e/sales.csv"},
                        }
                    ),
                }
                for n in range(10)
            ],
        )
    started = time.perf_counter()

    def poll() -> None:
        # An idle poller backs off, so its calls do not slow the moto server doing the others' work.
        while stack.environment.queue_depth("JobQueue"):
            if not source.poll_once().received:
                time.sleep(0.25)

    pollers = [threading.Thread(target=poll) for _ in range(concurrency)]
    for thread in pollers:
        thread.start()
    for thread in pollers:
        thread.join()
    elapsed = time.perf_counter() - started
    source.invoke = original
    _stop(pool)
    return elapsed


def _stop(pool: FunctionPool) -> None:
    """Every environment of the pool stopped (SHUTDOWN to its extensions), as the stack's stop does."""
    for env in pool.release_all():
        env.stop()
