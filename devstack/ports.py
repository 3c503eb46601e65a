"""The loopback ports a local stack listens on: taken when it starts, refused at once when another socket holds
one."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterable


class PortInUse(Exception):
    pass


def free_port(host: str = "127.0.0.1") -> int:
    """A port no socket holds now, picked by the kernel, for a server another process binds later (a sandbox's
    app, a test's server). Free when probed, not reserved: the process that binds it should start soon."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def listen_on(host: str, port: int) -> socket.socket:
    """A socket listening on host:port, taken when the stack starts and handed to the server that answers there.
    A port only probed free is still in the range connections take their local port from: one the stack makes
    while starting could hold it by the time its server binds. Connections of a stack stopped a moment ago linger
    in TIME_WAIT for about a minute; like any server (SO_REUSEADDR), the listener binds through them."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((host, port))
        listener.listen(socket.SOMAXCONN)
    except OSError:
        listener.close()
        raise PortInUse(f"port {port} on {host} is already in use; pass another with PORT=... ") from None
    return listener


def listen_on_each(host: str, ports: Iterable[int]) -> list[socket.socket]:
    """`listen_on` every port, or none of them."""
    with contextlib.ExitStack() as taken:
        listeners = [taken.enter_context(listen_on(host, port)) for port in ports]
        taken.pop_all()
        return listeners
