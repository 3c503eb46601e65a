"""A Lambda-shaped file system for one execution environment, without Docker.

With Linux user and mount namespaces (`unshare --user --map-root-user --mount`, no privileges needed)
the environment sees what a Lambda python3.13 sandbox shows its code:
- /var/task  the function's build output, read-only;
- /opt       the function's layers merged as Lambda extracts them (in the function's order, a later
             layer's file over an earlier one's), read-only;
- /var/runtime  AWS's Runtime Interface Client and the runtime's bootstrap, read-only;
- /var/lang  the python3.13 interpreter, its site-packages holding what the runtime provides (boto3);
- /tmp       private, writable, the size of the function's ephemeral storage;
- everything else (/usr, /etc, ...) read-only from this machine. Nothing outside /tmp is writable.
The network is this machine's: loopback reaches the local stack's endpoints and the Runtime API.

Without namespaces (macOS, or a kernel that forbids them) `emulated_paths()` points the same variables
at the host folders instead; that run does not prove read-only code, the /opt layout or writes outside /tmp.
"""

from __future__ import annotations

import atexit
import functools
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

TASK_ROOT = "/var/task"
RUNTIME_DIR = "/var/runtime"
LANG_DIR = "/var/lang"
OPT_DIR = "/opt"
# From this machine, read-only; usr-merged distributions make bin/lib/sbin symlinks into /usr.
_HOST_DIRS = ("usr", "etc", "bin", "sbin", "lib", "lib64", "lib32", "libx32")


class SandboxUnavailable(Exception):
    """This machine cannot make a Lambda-shaped sandbox; the message says what is missing."""


@dataclass(frozen=True)
class SandboxLayout:
    """What goes where inside one execution environment (host paths)."""

    task_dir: Path  # -> /var/task
    layer_dirs: tuple[Path, ...]  # merged -> /opt
    runtime_dir: Path  # -> /var/runtime
    interpreter_prefix: Path  # -> /var/lang
    provided_packages: Path  # -> /var/lang/lib/python3.X/site-packages
    python_version: str  # "3.13"
    tmp_megabytes: int = 512
    hosts_file: Path | None = None  # -> /etc/hosts


def opt_dir(layer_dirs: tuple[Path, ...]) -> Path | None:
    """The host folder that stands for /opt: the one layer itself, or the layers merged file by file.

    Lambda merges a function's layers into /opt in the order the function lists them
    (https://docs.aws.amazon.com/lambda/latest/dg/adding-layers.html): folders (python/, extensions/)
    merge, and a file that two layers both ship is the later layer's, as extracting them in turn leaves it.
    """
    if not layer_dirs:
        return None
    if len(layer_dirs) == 1:
        return layer_dirs[0]
    return _merged(layer_dirs)


@functools.cache
def _merged(layer_dirs: tuple[Path, ...]) -> Path:
    # Hard links where the file system allows (no copy of the layers' bytes); removed when this process ends.
    merged = Path(tempfile.mkdtemp(prefix="lambda-opt-"))
    atexit.register(shutil.rmtree, merged, True)
    for layer in layer_dirs:
        for source in sorted(layer.rglob("*")):
            target = merged / source.relative_to(layer)
            if source.is_dir() and not source.is_symlink():
                if target.exists() and not target.is_dir():
                    target.unlink()
                target.mkdir(exist_ok=True)
                continue
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target)
            elif target.exists() or target.is_symlink():
                target.unlink()
            if source.is_symlink():
                target.symlink_to(source.readlink())
                continue
            try:
                os.link(source, target)
            except OSError:
                shutil.copy2(source, target)
    return merged


@functools.cache
def namespaces_available() -> bool:
    """True when this machine lets an unprivileged process make user + mount namespaces."""
    unshare = shutil.which("unshare")
    if not sys.platform.startswith("linux") or unshare is None:
        return False
    try:
        probe = subprocess.run(
            [unshare, "--user", "--map-root-user", "--mount", "true"], capture_output=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return probe.returncode == 0


def unavailable_reason() -> str:
    if not sys.platform.startswith("linux"):
        return f"{sys.platform} has no Linux user namespaces"
    if shutil.which("unshare") is None:
        return "`unshare` (util-linux) is not installed"
    return "this kernel refuses unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1)"


def sandbox_command(layout: SandboxLayout, root: Path, argv: list[str], environment: dict[str, str]) -> list[str]:
    """The command that builds the sandbox at `root` (an empty host folder) and execs argv inside it,
    in /var/task, with exactly `environment`."""
    opt = opt_dir(layout.layer_dirs)
    layers = [(entry.name, entry) for entry in sorted(opt.iterdir())] if opt is not None else []
    site = f"{LANG_DIR}/lib/python{layout.python_version}/site-packages"
    q = shlex.quote
    lines = [
        "set -eu",
        f"R={q(str(root))}",
        'mount -t tmpfs -o mode=0755 lambda-sandbox "$R"',
        'ro() { mkdir -p "$R$2"; mount --rbind "$1" "$R$2"; mount -o remount,bind,ro "$R$2"; }',
    ]
    for name in _HOST_DIRS:
        host = Path("/") / name
        if host.is_symlink():
            lines.append(f'ln -s {q(str(host.readlink()))} "$R/{name}"')
        elif host.is_dir():
            lines.append(f"ro /{name} /{name}")
    lines += [
        'mkdir -p "$R/proc" "$R/dev" "$R/tmp" "$R/var"',
        'mount --rbind /proc "$R/proc"',
        'mount --rbind /dev "$R/dev"',
        f'mount -t tmpfs -o size={layout.tmp_megabytes}m,mode=1777 lambda-tmp "$R/tmp"',
        f"ro {q(str(layout.task_dir))} {TASK_ROOT}",
        f"ro {q(str(layout.runtime_dir))} {RUNTIME_DIR}",
        f"ro {q(str(layout.interpreter_prefix))} {LANG_DIR}",
        f"ro {q(str(layout.provided_packages))} {site}",
        f'mkdir -p "$R{OPT_DIR}"',
        f'mount -t tmpfs -o mode=0755 lambda-opt "$R{OPT_DIR}"',
    ]
    for name, source in layers:
        target = f"{OPT_DIR}/{name}"
        if source.is_dir():
            lines.append(f"ro {q(str(source))} {q(target)}")
        else:
            lines.append(f'touch "$R"{q(target)}; mount --bind {q(str(source))} "$R"{q(target)}')
            lines.append(f'mount -o remount,bind,ro "$R"{q(target)}')
    lines += [
        f'mount -o remount,ro "$R{OPT_DIR}"',
        *(
            [f'mount --bind {q(str(layout.hosts_file))} "$R/etc/hosts"', 'mount -o remount,bind,ro "$R/etc/hosts"']
            if layout.hosts_file is not None
            else []
        ),
        'mount -o remount,ro "$R"',
        f'exec chroot "$R" /usr/bin/env -i --chdir={TASK_ROOT} '
        + " ".join(q(f"{k}={v}") for k, v in environment.items())
        + " "
        + " ".join(q(arg) for arg in argv),
    ]
    return [
        shutil.which("unshare") or "unshare",
        "--user",
        "--map-root-user",
        "--mount",
        "--propagation",
        "private",
        "--",
        "/bin/sh",
        "-c",
        "\n".join(lines),
    ]


def emulated_paths(layout: SandboxLayout) -> dict[str, str]:
    """Host folders standing in for the sandbox paths, where namespaces are unavailable."""
    return {
        TASK_ROOT: str(layout.task_dir),
        RUNTIME_DIR: str(layout.runtime_dir),
        LANG_DIR: str(layout.interpreter_prefix),
        OPT_DIR: str(opt_dir(layout.layer_dirs) or OPT_DIR),
    }
