"""Every function's cold import, each in a fresh interpreter of the deploy's runtime with its template
environment and only its built code and layers on the path: what it loads (top-level packages, for the
structural check in tests/template/test_bench_figures.py) and how long it takes, against a bare handler
that imports boto3 and creates its one client and against the previous release's handler module; and what each
ships: its code and each of its layers."""

from __future__ import annotations

import io
import os
import statistics
import subprocess
import tarfile
import zipfile
from collections.abc import Sequence
from functools import cache
from pathlib import Path

import boto3
from moto import mock_aws

from devstack.runtime.interpreter import RUNTIME_VERSION
from tests.bench.measure import RESULTS, ROOT, DeployedPython, load_average, probe_in_new_interpreter

RUNS = 5
# Packages whose presence says what a function pays for (the MCP stack, the AWS SDK, tracing).
WATCHED = ("mcp", "mcp_types", "starlette", "uvicorn", "sse_starlette", "httpx", "anyio", "boto3", "aws_xray_sdk")
MCP_STACK = {"mcp", "mcp_types", "starlette", "uvicorn", "sse_starlette"}
MB = 1024 * 1024
# ToolWorker's layers (the core layer and the telemetry extension's), unzipped: the target the build keeps to
# (tests/template/test_build_artifacts.py checks the arm64 build against it), 15 MB in 10^6 bytes, the stricter
# reading of "15 MB" (15 MiB is 15.7 MB). mcp_backend's endpoint-only parts ship in McpLayer to keep to it.
TOOL_WORKER_LAYERS_TARGET_BYTES = 15_000_000
DEPLOY_BUILD = ROOT / ".aws-sam" / "build"
PROBE = (
    "import sys, time, json, importlib\n"
    "t = time.perf_counter()\n"
    "module = importlib.import_module(sys.argv[1])\n"
    "elapsed = time.perf_counter() - t\n"
    "print(json.dumps({'seconds': elapsed, 'packages': sorted({m.split('.')[0] for m in sys.modules})}))\n"
)
# What the runtime sets beside the template's Environment (devstack.runtime.in_process.function_environment).
RUNTIME_NAMES = ("AWS_LAMBDA_FUNCTION_NAME", "AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "AWS_REGION", "_HANDLER")
BARE_HANDLER = "import boto3\nclient = boto3.client('sqs')\ndef handler(event, context):\n    return None\n"
# Parts off by default whose functions the cold-start tables measure too, each from a stack with them on.
OPTIONAL_PARTS = {"DurableWorker": "Enabled"}
# The release the cold-start column compares with: the last commit of 2026-12-01. Its handlers and shared package
# (from git, .pyc precompiled for the runtime as the build does) are imported on the same built dependencies, in
# the same run, alternating with the current build.
PREVIOUS_RELEASE = "fce14789d58269ffc53ca45ccf2617653ff1c27f"
# Variables the previous release's worker settings required and the template no longer sets.
PREVIOUS_RELEASE_ENVIRONMENT = {
    "JOB_QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/123456789012/JobQueue",
    "JOB_QUEUE_VISIBILITY_TIMEOUT_SECONDS": "900",
}


def _import(python: Path, module: str, environment: dict[str, str]) -> tuple[float, list[str]]:
    found = probe_in_new_interpreter(python, PROBE, [module], environment)
    return found["seconds"], found["packages"]


def served_module(code_dir: Path, handler: str) -> str:
    """The module a function's init imports: a handler's, or for a web function (its handler is a start script)
    the app module uvicorn's factory names (`--factory mcp_backend.mcp.server:create_app`)."""
    if not handler.endswith(".sh"):
        return handler.rsplit(".", 1)[0]
    return (code_dir / handler).read_text().split("--factory ", 1)[1].split(":", 1)[0]


def previous_release(python: Path) -> Path:
    """The previous release's `functions/` and shared package, unpacked from git once per commit and compiled for
    the runtime's interpreter."""
    folder = ROOT / "build" / f"bench-release-{PREVIOUS_RELEASE[:12]}"
    if not (folder / ".ready").exists():
        archive = subprocess.run(
            ["git", "archive", PREVIOUS_RELEASE, "functions", "layers/shared/mcp_backend"],
            cwd=ROOT,
            capture_output=True,
            check=True,
        ).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(folder, filter="data")
        subprocess.run([str(python), "-m", "compileall", "-q", str(folder)], check=True)
        (folder / ".ready").write_text(PREVIOUS_RELEASE)
    return folder


def _previous_environment(
    deployed: DeployedPython, release: Path, code_dir: Path, layer_ids: list[str], variables: dict[str, str]
) -> dict[str, str] | None:
    """The previous release's handler folder and shared package ahead of the built layers (their mcp_backend is
    shadowed, their dependencies used), or None for a function that release did not have."""
    code = release / code_dir.relative_to(ROOT)
    if not code.is_dir():
        return None
    environment = deployed.environment(None, layer_ids, **{**PREVIOUS_RELEASE_ENVIRONMENT, **variables})
    ahead = [str(code), str(release / "layers" / "shared")]
    environment["PYTHONPATH"] = os.pathsep.join([*ahead, environment["PYTHONPATH"]])
    return environment


def _files(folder: Path) -> list[Path]:
    return sorted(path for path in folder.rglob("*") if path.is_file())


def layers_unzipped_bytes(build_dir: Path, layer_ids: Sequence[str]) -> int:
    """What a function's own layers hold unzipped, from the build output: the sum of their files' sizes (what
    Lambda's unzipped quota counts, and the figure the core layer's size target is set in)."""
    return sum(path.stat().st_size for layer_id in layer_ids for path in _files(build_dir / layer_id))


@cache
def _size(folder: Path) -> tuple[int, int]:
    """Bytes of a built folder unzipped, and as the zip sam uploads (deflated)."""
    files = _files(folder)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in files:
            archive.write(path, path.relative_to(folder))
    return sum(path.stat().st_size for path in files), buffer.tell()


def _shipped(code_dir: Path, layer_ids: list[str], layer_dirs: list[Path]) -> dict:
    code, code_zipped = _size(code_dir)
    layers = {layer_id: _size(folder) for layer_id, folder in zip(layer_ids, layer_dirs, strict=True)}
    return {
        "code_bytes": code,
        "code_zipped_bytes": code_zipped,
        "layer_bytes": {layer_id: size[0] for layer_id, size in layers.items()},
        "layer_zipped_bytes": {layer_id: size[1] for layer_id, size in layers.items()},
        "total_bytes": code + sum(size[0] for size in layers.values()),
        "total_zipped_bytes": code_zipped + sum(size[1] for size in layers.values()),
    }


def _tool_worker_layers_row(local_build: Path, layer_ids: list[str]) -> str:
    """ToolWorker's layers against their target in the deploy build (what `make build` leaves, arm64: what
    deploys; `make bench` builds it) and in the build the rest of this section measures."""
    builds = dict.fromkeys([DEPLOY_BUILD, local_build])
    figures = {
        folder: layers_unzipped_bytes(folder, layer_ids) for folder in builds if (folder / layer_ids[0]).is_dir()
    }
    RESULTS.setdefault("functions", {})["tool_worker_layers_unzipped_bytes"] = {
        str(folder.relative_to(ROOT)): size for folder, size in figures.items()
    }
    measured = "; ".join(
        f"`{folder.relative_to(ROOT)}` {size:,} bytes ({size / 10**6:.2f} MB, {size / MB:.2f} MiB)"
        + (
            f", target {'met' if size <= TOOL_WORKER_LAYERS_TARGET_BYTES else 'NOT met'}"
            if folder == DEPLOY_BUILD
            else ""
        )
        for folder, size in figures.items()
    )
    return (
        f"ToolWorker's layers ({', '.join(layer_ids)}) unzipped, the sum of their files' sizes in the build output "
        f"(here MB = 10^6 bytes, MiB = 2^20 bytes: the tables above count in MiB), against a target of at most "
        f"{TOOL_WORKER_LAYERS_TARGET_BYTES:,} bytes "
        f"for the deploy build (`{DEPLOY_BUILD.relative_to(ROOT)}`, arm64); a local build for another architecture "
        f"is shown beside it, not held to the target (x86_64 wheels are larger): {measured}."
    )


def run() -> list[str]:
    from devstack.runtime.in_process import function_environment
    from devstack.stack.resources import LocalStack

    with mock_aws():
        stack = LocalStack(boto3.client).create_all()
        specs = [stack.function(logical_id) for logical_id in stack.functions()]
        optional = LocalStack(boto3.client, parameters=OPTIONAL_PARTS, stack_name="bench-optional").create_all()
        specs += [optional.function(name) for name in optional.functions() if name not in stack.functions()]
    deployed = DeployedPython.prepare(stack.template)
    credentials = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": "us-east-1"}
    bare_dir = ROOT / "build" / "bench-bare-handler"
    bare_dir.mkdir(parents=True, exist_ok=True)
    (bare_dir / "bare.py").write_text(BARE_HANDLER)
    bare_environment = deployed.environment(bare_dir, [], **credentials)

    build_dir = deployed.build_dir
    load_before = load_average()
    release = previous_release(deployed.python)
    rows, size_rows, figures, bare_samples, imported, previous = [], [], {}, [], {}, {}
    for spec in specs:
        module = served_module(spec.code_dir, spec.handler)
        layer_ids = deployed.layer_ids(spec.layer_refs)
        with function_environment(spec, stack.region):
            environment = {name: os.environ[name] for name in (*spec.environment, *RUNTIME_NAMES)}
        samples: list[float] = []
        previous_samples: list[float] = []
        packages: list[str] = []
        variables = {**credentials, **environment}
        previous_environment = _previous_environment(deployed, release, spec.code_dir, layer_ids, variables)
        for _ in range(RUNS):  # alternate with the baselines, so drift on a shared machine hits them all
            bare_samples.append(_import(deployed.python, "bare", bare_environment)[0])
            seconds, packages = _import(
                deployed.python, module, deployed.environment(build_dir / spec.logical_id, layer_ids, **variables)
            )
            samples.append(seconds)
            if previous_environment is not None:
                previous_samples.append(_import(deployed.python, module, previous_environment)[0])
        imported[spec.logical_id] = (module, statistics.median(samples), packages, layer_ids)
        previous[spec.logical_id] = statistics.median(previous_samples) if previous_samples else None
    bare = statistics.median(bare_samples)
    load_after = load_average()
    for spec in specs:
        module, seconds, packages, layer_ids = imported[spec.logical_id]
        loaded = [name for name in WATCHED if name in packages]
        shipped = _shipped(build_dir / spec.logical_id, layer_ids, [build_dir / layer_id for layer_id in layer_ids])
        before = previous[spec.logical_id]
        figures[spec.logical_id] = {
            "handler": spec.handler,
            "import_ms": seconds * 1000,
            "previous_release_import_ms": before * 1000 if before is not None else None,
            "packages": packages,
            "layers": layer_ids,
            "imports_mcp": bool(MCP_STACK & set(packages)),
            "shipped": shipped,
        }
        layer_text = ", ".join(
            f"{layer_id} {shipped['layer_bytes'][layer_id] / MB:.1f} MB "
            f"({shipped['layer_zipped_bytes'][layer_id] / MB:.1f} zipped)"
            for layer_id in layer_ids
        )
        size_rows.append(
            f"| {spec.logical_id} | {shipped['code_bytes'] / 1024:.1f} KB | {layer_text} | "
            f"{shipped['total_bytes'] / MB:.1f} MB ({shipped['total_zipped_bytes'] / MB:.1f} zipped) |"
        )
        against = f"{before * 1000:.0f} ms | {seconds / before:.2f}x" if before is not None else "- | -"
        rows.append(
            f"| {spec.logical_id} | `{module}` | {seconds * 1000:.0f} ms | {against} | {seconds / bare:.2f}x | "
            f"{', '.join(loaded) or '-'} |"
        )
    RESULTS["functions"] = {
        "bare_handler_import_ms": bare * 1000,
        "previous_release": PREVIOUS_RELEASE,
        "functions": figures,
    }
    layer_size_row = _tool_worker_layers_row(build_dir, figures["ToolWorker"]["layers"])
    return [
        "## Functions: cold import and what each loads",
        "",
        f"Each function's handler module (McpServer: its app module) imported in a fresh interpreter of the "
        f"deploy's runtime (python{RUNTIME_VERSION}, with the boto3 the runtime provides) with its template "
        f"environment and only its built code and layers on the path (`{build_dir.relative_to(ROOT)}`, "
        f".pyc precompiled for that runtime), median of {RUNS}; baseline, alternating with each function's runs: "
        f"a bare handler that imports boto3 and creates its one client ({bare * 1000:.0f} ms, same runtime). "
        f"Previous release: commit `{PREVIOUS_RELEASE[:7]}` (the last of 2026-12-01), its handler and shared "
        f"package (.pyc precompiled) on the same built dependencies, measured in the same run, alternating; `-` "
        f"where it had no such function. Functions of parts off by default "
        f"({', '.join(f'{k}={v}' for k, v in OPTIONAL_PARTS.items())}) with those parts on. Loaded: the "
        f"packages of interest found in `sys.modules` afterwards (the "
        f"full list is in `docs/benchmarks.json`). Load average (1, 5, 15 min) when the imports began: "
        f"{load_before}; when they ended: {load_after}.",
        "",
        "| function | module | cold import | previous release | now / previous | vs bare boto3 handler | loaded |",
        "|---|---|---|---|---|---|---|",
        *rows,
        "",
        "No worker's handler module but DurableToolWorker's imports the AWS SDK (the durable execution SDK imports "
        "boto3 when it is imported, and every invocation of an execution checkpoints through its client: "
        'docs/job-pipeline.md, "Its cold start"). Powertools\' idempotency package re-exports its DynamoDB '
        "persistence layer, which imports boto3: about two thirds of a worker's import at the previous release. "
        "`mcp_backend.idempotency` defers that package's `__init__` until the first record builds its persistence "
        "layer (`tests/unit/test_worker_cold_import.py`), so the first batch pays for the SDK instead of the init "
        "(about the bare handler's figure). A worker's batch is not a caller's request; McpServer loads no SDK at "
        "import either. To see where an import goes: `python -X importtime -c 'import app'` in the runtime's "
        "interpreter with the function's build folder and layers on `PYTHONPATH`.",
        "",
        "What each function ships (the same build, with its .pyc): its code "
        "and each of the stack's layers it lists, unzipped and as deflated zips; published layers (the Web Adapter, "
        "the Parameters and Secrets extension) are not counted.",
        "",
        "| function | code | layers | total |",
        "|---|---|---|---|",
        *size_rows,
        "",
        layer_size_row,
        "",
    ]
