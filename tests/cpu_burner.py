"""Run a command while every core is busy: `python -m tests.cpu_burner <command...>` (`make test-contended`).

One spinning process per core (os.cpu_count()) at the command's own priority, started before it and ended after
it, whatever its outcome; the exit status is the command's. A burner also ends by itself once the process that
started it is gone (a killed run leaves nothing spinning). A test that depends on timing, or on a thread being
scheduled promptly, fails here rather than on a loaded CI machine."""

from __future__ import annotations

import os
import subprocess
import sys

# Spins, and looks up its parent every few million steps: an orphaned burner stops within a fraction of a second.
SPIN = """
import os, sys
parent = int(sys.argv[1])
while os.getppid() == parent:
    for _ in range(2_000_000):
        pass
"""


def burners(count: int) -> list[subprocess.Popen[bytes]]:
    return [subprocess.Popen([sys.executable, "-c", SPIN, str(os.getpid())]) for _ in range(count)]


def main(command: list[str]) -> int:
    if not command:
        print("usage: python -m tests.cpu_burner <command...>", file=sys.stderr)
        return 2
    cores = os.cpu_count() or 1
    spinning = burners(cores)
    print(f"cpu_burner: {cores} busy process(es) while running: {' '.join(command)}", file=sys.stderr, flush=True)
    try:
        return subprocess.run(command, check=False).returncode
    finally:
        for burner in spinning:
            burner.kill()
        for burner in spinning:
            burner.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
