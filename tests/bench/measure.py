"""Timing helpers for the benchmarks."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from devstack.server import DevStack, DevStackOptions
from tests.e2e.conftest import BUILD_DIR, free_port

ROOT = Path(__file__).resolve().parents[2]


def fresh_interpreter_seconds(code: str, runs: int, env: dict[str, str] | None = None) -> float:
    """Median wall time of `code`, each run in a new interpreter (what a cold start pays)."""
    samples = []
    for _ in range(runs):
        out = subprocess.run(
            [
                sys.executable,
                "-c",
                f"import time; _t=time.perf_counter()\n{code}\nprint(time.perf_counter()-_t)",
            ],
            cwd=ROOT,
            env={**os.environ, **(env or {})},
            capture_output=True,
            text=True,
            check=True,
        )
        samples.append(float(out.stdout.strip().splitlines()[-1]))
    return statistics.median(samples)


def per_item_seconds(fn, items: int, repeats: int = 3) -> float:
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - started) / items)
    return statistics.median(samples)


def lambda_runtime_stack(function_environment: dict[str, str] | None = None) -> DevStack:
    """The product stack, started, its functions the build output in the local Lambda runtime; the caller
    drives the event sources (no threads) and stops it. `function_environment` is added to every
    function's environment (e.g. a service-specific AWS_ENDPOINT_URL_<SERVICE>)."""
    options = DevStackOptions(
        aws_port=free_port(),
        lambda_port=free_port(),
        web_port=free_port(),
        run_threads=False,
        runtime="lambda",
        build_dir=BUILD_DIR,
        prewarm=False,
    )
    options.function_overrides.update(function_environment or {})
    stack = DevStack(options)
    stack.start()
    return stack


# Figures for docs/benchmarks.json, filled by each section as it measures.
RESULTS: dict = {}
