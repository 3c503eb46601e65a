"""`make test-contended`'s burner: the command's exit status is the run's, and no burner outlives the run."""

from __future__ import annotations

import os
import sys

from tests import cpu_burner


def children_of(pid: int) -> set[int]:
    """Live (not zombie) child processes of `pid`, from /proc."""
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            found.add(int(entry))
    return found


def test_the_run_answers_the_commands_exit_status_and_leaves_no_burner_behind():
    # Given this process's children before the run
    before = children_of(os.getpid())

    # When a command that exits 3 runs under the burner
    command = [sys.executable, "-c", "import sys; sys.exit(3)"]
    status = cpu_burner.main(command)

    # Then the run answers 3 and no burner is left
    assert status == 3
    assert children_of(os.getpid()) == before


def test_without_a_command_it_says_how_to_use_it(capsys):
    assert cpu_burner.main([]) == 2
    assert "usage" in capsys.readouterr().err
