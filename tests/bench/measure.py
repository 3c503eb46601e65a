"""Timing helpers for the benchmarks."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from devstack.runtime.build_output import check_build, layer_dirs_for
from devstack.runtime.runtime_image import host_architecture, prepare_runtime_image
from devstack.runtime.sandbox import opt_dir
from devstack.server import DevStack, DevStackOptions
from devstack.stack.template import Template
from tests.e2e.conftest import BUILD_DIR, free_port

ROOT = Path(__file__).resolve().parents[2]
T = TypeVar("T")


def fresh_interpreter_seconds(code: str, runs: int, env: dict[str, str] | None = None) -> float:
    """Median wall time of `code`, each run in a new interpreter (what a cold start pays)."""
    environment = {**os.environ, **(env or {})}
    return statistics.median(timed_in_new_interpreter(sys.executable, code, environment) for _ in range(runs))


def timed_in_new_interpreter(python: os.PathLike[str] | str, code: str, env: dict[str, str]) -> float:
    """Wall time of `code` in a new interpreter, from its first line (the interpreter's own start excluded)."""
    out = subprocess.run(
        [str(python), "-c", f"import time; _t=time.perf_counter()\n{code}\nprint(time.perf_counter()-_t)"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"{python} failed: {out.stderr[-2000:]}")
    return float(out.stdout.strip().splitlines()[-1])


def probe_in_new_interpreter(python: os.PathLike[str] | str, code: str, args: list[str], env: dict[str, str]) -> Any:
    """What `code` (run with `args`, from /) prints as JSON on its last line, in a new interpreter."""
    out = subprocess.run(
        [str(python), "-c", code, *args], env=env, cwd="/", capture_output=True, text=True, check=False
    )
    if out.returncode != 0:
        raise RuntimeError(f"{python} {' '.join(args)} failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def paired_runs(ours: Callable[[], T], baseline: Callable[[], T], pairs: int) -> list[tuple[T, T]]:
    """`pairs` runs of each, one pair after the other, the order swapped every pair (so neither always runs on a
    machine the other has just warmed or loaded)."""
    runs = []
    for index in range(pairs):
        if index % 2:
            second = baseline()
            runs.append((ours(), second))
        else:
            first = ours()
            runs.append((first, baseline()))
    return runs


def paired_ratio(runs: list[tuple[float, float]]) -> float:
    """The median of each pair's ours / baseline: the load of a shared machine moves both runs of a pair alike,
    so the ratio drifts less than the ratio of two medians taken minutes apart."""
    return statistics.median(ours / baseline for ours, baseline in runs)


def paired_ratio_quartiles(runs: list[tuple[float, float]]) -> tuple[float, float]:
    """The first and third quartiles of the pairs' ratios: how far one run's ratio strays on this machine."""
    quartiles = statistics.quantiles([ours / baseline for ours, baseline in runs], n=4)
    return quartiles[0], quartiles[2]


@dataclass(frozen=True)
class DeployedPython:
    """Where cold imports are measured: the deploy's runtime (python3.13, the local Lambda runtime's
    interpreter, with the packages the runtime provides: boto3) importing the build output, its .pyc
    precompiled for that runtime, in Lambda's module path order: function code, each layer's python/, then
    the runtime's own packages. What ships, loaded the way Lambda loads it, not the sources in the dev venv."""

    python: Path
    provided: Path
    build_dir: Path
    code_paths: dict[str, Path]

    @classmethod
    def prepare(cls, template: Template) -> DeployedPython:
        check_build(BUILD_DIR, host_architecture(), template.code_paths)
        image = prepare_runtime_image()
        build_dir = BUILD_DIR if BUILD_DIR.is_absolute() else ROOT / BUILD_DIR
        return cls(image.python, image.provided_packages, build_dir, dict(template.code_paths))

    def layer_ids(self, layer_refs: Sequence[str]) -> list[str]:
        """The stack's own layers among a function's, in its order: the ones built into the build folder
        (published ones, such as the Web Adapter, are not ours)."""
        dirs = layer_dirs_for(list(layer_refs), self.build_dir, self.code_paths)
        return [folder.name for folder in dirs if folder.parent == self.build_dir]

    def environment(self, first: Path | None, layer_ids: list[str], **variables: str) -> dict[str, str]:
        """A new interpreter's environment. Module path: `first` (a function's code folder in the build), the
        layers' python/ merged as Lambda merges them into /opt/python (a package may span two layers), the
        runtime's packages. No .pyc written: Lambda's code and layers are read-only (/tmp
        is the writable directory: "Lambda isolation technologies",
        https://docs.aws.amazon.com/whitepapers/latest/security-overview-aws-lambda/lambda-isolation-technologies.html),
        so what the build did not precompile is compiled again on every cold start."""
        folders = [first] if first else []
        opt = opt_dir(tuple(self.build_dir / layer_id for layer_id in layer_ids))
        if opt is not None:
            folders.append(opt / "python")
        return {
            "PATH": os.environ["PATH"],
            "PYTHONPATH": os.pathsep.join(str(folder) for folder in [*folders, self.provided]),
            "PYTHONDONTWRITEBYTECODE": "1",
            **variables,
        }


def load_average() -> str:
    """The machine's load average over 1, 5 and 15 minutes: how busy the shared cores were around a measure."""
    return ", ".join(f"{value:.2f}" for value in os.getloadavg())


def per_item_seconds(fn, items: int, repeats: int = 3) -> float:
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - started) / items)
    return statistics.median(samples)


def lambda_runtime_stack(
    function_environment: dict[str, str] | None = None, parameters: dict[str, str] | None = None
) -> DevStack:
    """The product stack, started, its functions the build output in the local Lambda runtime; the caller
    drives the event sources (no threads) and stops it. `function_environment` is added to every
    function's environment (e.g. a service-specific AWS_ENDPOINT_URL_<SERVICE>); `parameters` override the
    template's defaults (e.g. a part that is off by default)."""
    options = DevStackOptions(
        parameters=dict(parameters or {}),
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
