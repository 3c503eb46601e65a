"""`make bench`: measure, then rewrite docs/benchmarks.md with the figures and the command.

The machine is shared and noisy, so each figure is reported next to a baseline measured in the
same run, as a ratio.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "layers" / "shared"))
DOC = ROOT / "docs" / "benchmarks.md"
# The figures as data, for regression checks that read structure rather than times.
FIGURES = ROOT / "docs" / "benchmarks.json"


def main() -> int:
    os.environ.update(
        AWS_ACCESS_KEY_ID="bench",
        AWS_SECRET_ACCESS_KEY="bench",
        AWS_DEFAULT_REGION="us-east-1",
    )
    from devstack.stack.template import globals_environment

    # Before any shared module builds its Logger and Metrics (the in-process benches import them).
    for name, value in globals_environment().items():
        os.environ.setdefault(name, value)
    from tests.bench import controls, endpoint, functions, lambda_runtime, local_stack, mcp, streams, tracing, worker
    from tests.bench.measure import RESULTS

    modules = [worker, streams, mcp, endpoint, controls, tracing, functions, local_stack, lambda_runtime]
    # `python -m tests.bench endpoint mcp`: re-measure only those sections, keep the others' last figures.
    chosen = sys.argv[1:]
    unknown = set(chosen) - {m.__name__.rsplit(".", 1)[1] for m in modules}
    if unknown:
        print(f"unknown bench sections: {sorted(unknown)}", file=sys.stderr)
        return 2
    if chosen and DOC.exists() and FIGURES.exists():
        RESULTS.update(json.loads(FIGURES.read_text()))
        previous = _sections(DOC.read_text())
    else:
        previous = {}
    sections = []
    for module in modules:
        name = module.__name__.rsplit(".", 1)[1]
        if chosen and name not in chosen and module.__name__ in previous:
            sections.append(previous[module.__name__])
        else:
            sections.append(module.run())
    header = [
        "# Benchmarks",
        "",
        "Written by `make bench` (`python -m tests.bench`); do not edit by hand.",
        f"Run: {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, Python {platform.python_version()},",
        f"{os.cpu_count()} cores, {platform.machine()}. Figures are medians; compare the ratios,",
        "which are measured in the same run, rather than absolute times on a shared machine.",
        "",
    ]
    DOC.parent.mkdir(exist_ok=True)
    if chosen:
        header.insert(-1, f"Re-measured in this run: {', '.join(chosen)}; the other sections as last measured.")
    body = [
        f"<!-- {m.__name__} -->\n" + "\n".join(section).rstrip("\n") + "\n"
        for m, section in zip(modules, sections, strict=True)
    ]
    DOC.write_text("\n".join(header) + "\n" + "\n".join(body))
    RESULTS["run"] = {"python": platform.python_version(), "cores": os.cpu_count(), "machine": platform.machine()}
    FIGURES.write_text(json.dumps(RESULTS, indent=2, sort_keys=True) + "\n")
    print(DOC.read_text())
    return 0


def _sections(text: str) -> dict[str, list[str]]:
    """The doc's sections by the module that wrote them (each opens with an HTML comment naming it)."""
    found = {}
    for part in text.split("<!-- ")[1:]:
        name, _, body = part.partition(" -->\n")
        found[name] = body.rstrip("\n").split("\n")
    return found


if __name__ == "__main__":
    sys.exit(main())
