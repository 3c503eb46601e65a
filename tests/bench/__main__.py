"""`make bench`: measure, then rewrite docs/benchmarks.md with the figures and the command.

The machine is shared and noisy, so each figure is reported next to a baseline measured in the
same run, as a ratio.
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "layers" / "shared"))
DOC = ROOT / "docs" / "benchmarks.md"


def main() -> int:
    os.environ.update(
        AWS_ACCESS_KEY_ID="bench",
        AWS_SECRET_ACCESS_KEY="bench",
        AWS_DEFAULT_REGION="us-east-1",
        POWERTOOLS_TRACE_DISABLED="1",
    )
    from tests.bench import lambda_runtime, local_stack, mcp, streams, worker

    sections = [worker.run(), streams.run(), mcp.run(), local_stack.run(), lambda_runtime.run()]
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
    DOC.write_text("\n".join(header + [line for section in sections for line in section]) + "\n")
    print(DOC.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
