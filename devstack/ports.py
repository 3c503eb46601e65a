"""The loopback ports a local stack listens on: refused at the start when another socket holds one."""

from __future__ import annotations

import socket


class PortInUse(Exception):
    pass


def require_free(host: str, port: int) -> None:
    """Refuse a port another socket listens on. Connections of a stack stopped a moment ago linger in
    TIME_WAIT for about a minute; like the servers themselves (SO_REUSEADDR), the probe binds through them."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            raise PortInUse(f"port {port} on {host} is already in use; pass another with PORT=... ") from None
