"""Loopback ports for a process that binds them later: a sandbox's app (AWS_LWA_PORT), `make invoke`'s servers.

A port the kernel picks for a probe socket (port 0) comes from the range it also gives connections their local
ports from, so any loopback connection made between the probe and the bind can hold it by then: the bind fails.
Ports below that range are taken only by an explicit bind, which the probe sees.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

EPHEMERAL_PORT_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST_PORT = 20000  # above the well-known and most registered services' ports
ATTEMPTS = 50


def free_loopback_port() -> int:
    """A loopback port no socket holds now, from below the kernel's range for connections' local ports (Linux);
    where the range is not published, one the kernel picks."""
    try:
        low = int(EPHEMERAL_PORT_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 0
    for _ in range(ATTEMPTS if low > LOWEST_PORT else 0):
        port = _pick(LOWEST_PORT, low - 1)
        if _free(port):
            return port
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _pick(low: int, high: int) -> int:
    return random.randint(low, high)  # noqa: S311 - a port, not a secret


def _free(port: int) -> bool:
    # As the servers bind (SO_REUSEADDR): a port whose last connections linger in TIME_WAIT is free for them.
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True
