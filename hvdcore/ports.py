"""A TCP port to hand to another process (a store's ``MASTER_PORT``, a daemon's port).

Binding port 0 and closing the socket finds a free port, but the kernel hands out ports of that
same range (``net.ipv4.ip_local_port_range``) to every outgoing connection and every bind to
port 0 on the machine: until the other process listens, anyone may get it. A port below that
range is only ever taken by a process that names it.

Example::

    >>> port = handoff_port()
    >>> ephemeral_range()[0] > port >= LOWEST
    True
"""

from __future__ import annotations

import random
import socket

__all__ = ["LOWEST", "ephemeral_range", "handoff_port", "handoff_ports"]

#: The lowest port handed out (below: well-known and registered services' habits).
LOWEST = 10000
_RANGE_FILE = "/proc/sys/net/ipv4/ip_local_port_range"
_LINUX_DEFAULT = (32768, 60999)


def ephemeral_range(path: str = _RANGE_FILE) -> tuple[int, int]:
    """The ports the kernel picks from for port 0 and outgoing connections (Linux's default
    where the setting cannot be read)."""
    try:
        with open(path, encoding="ascii") as f:
            low, high = (int(v) for v in f.read().split())
        return low, high
    except (OSError, ValueError):
        return _LINUX_DEFAULT


def handoff_ports(count: int, host: str = "127.0.0.1", tries: int = 200) -> list[int]:
    """``count`` different ports free on ``host`` now, below the ephemeral range when there is
    room there (else ports the kernel picks). Raises OSError when ``tries`` random ports in a
    row were all taken."""
    top = ephemeral_range()[0] - 1
    ports: list[int] = []
    if top <= LOWEST:
        socks = [socket.socket() for _ in range(count)]
        try:
            for s in socks:
                s.bind((host, 0))
                ports.append(int(s.getsockname()[1]))
        finally:
            for s in socks:
                s.close()
        return ports
    pick = random.SystemRandom()
    failed = 0
    while len(ports) < count:
        port = pick.randint(LOWEST, top)
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                port = 0
        if port and port not in ports:
            ports.append(port)
            failed = 0
        elif (failed := failed + 1) >= tries:
            raise OSError(f"no free TCP port in {LOWEST}-{top} on {host} after {tries} tries")
    return ports


def handoff_port(host: str = "127.0.0.1") -> int:
    """One port of :func:`handoff_ports`."""
    return handoff_ports(1, host)[0]
