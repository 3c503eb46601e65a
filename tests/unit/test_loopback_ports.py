"""Ports the local stack hands to a process that binds them later (a sandbox's app, `make invoke`'s servers)."""

from __future__ import annotations

import socket
from pathlib import Path

from devstack.runtime import loopback_ports
from devstack.runtime.loopback_ports import free_loopback_port


def bindable(port: int) -> bool:
    """Whether a server can listen on the port now (create_server binds as servers do, with SO_REUSEADDR)."""
    try:
        with socket.create_server(("127.0.0.1", port)):
            return True
    except OSError:
        return False


def test_a_port_comes_from_below_the_range_connections_take_their_local_ports_from(tmp_path, monkeypatch):
    # Given the kernel gives connections their local ports from 32768-60999
    port_range = tmp_path / "ip_local_port_range"
    port_range.write_text("32768\t60999\n")
    monkeypatch.setattr(loopback_ports, "EPHEMERAL_PORT_RANGE", port_range)

    # When ports are chosen
    ports = [free_loopback_port() for _ in range(20)]

    # Then none is one a connection made before its process binds it could hold, and each is free
    assert all(loopback_ports.LOWEST_PORT <= port < 32768 for port in ports), ports
    assert all(bindable(port) for port in ports)


def test_a_port_another_socket_holds_is_never_chosen(tmp_path, monkeypatch):
    # Given a port a server listens on, and a chooser whose first pick is that port
    port_range = tmp_path / "ip_local_port_range"
    port_range.write_text("32768\t60999\n")
    monkeypatch.setattr(loopback_ports, "EPHEMERAL_PORT_RANGE", port_range)
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        taken = held.getsockname()[1]
        picks = iter([taken, taken, *range(20000, 20100)])
        monkeypatch.setattr(loopback_ports, "_pick", lambda low, high: next(picks))

        # When a port is chosen
        port = free_loopback_port()

    # Then it is another one
    assert port != taken


def test_without_the_kernels_range_the_kernel_chooses(monkeypatch):
    # Given a system that does not publish the range (not Linux)
    monkeypatch.setattr(loopback_ports, "EPHEMERAL_PORT_RANGE", Path("/nonexistent/ip_local_port_range"))

    # When a port is chosen
    port = free_loopback_port()

    # Then it is a free one
    assert bindable(port)
