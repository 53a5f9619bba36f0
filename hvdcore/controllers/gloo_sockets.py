"""The TCP connections of this job's Gloo groups, found in ``/proc`` so that they can be cut.

Gloo cannot cancel a collective: a rank waiting on a peer that is alive but has left the
collective (it saw another rank die and went to re-form the job) waits until the group's
timeout, and ``ProcessGroupGloo.abort()`` neither wakes it nor closes a connection. An elastic
job must not stand still that long, so a rank that leaves a generation after a failure shuts
down its Gloo connections: its own pending collectives fail at once, and so do its peers' (they
read end-of-file from it), who then leave the generation too.

A connection belongs to the job's Gloo groups when one of its ends is a Gloo listening port of
the job: this rank's listeners are the ones that appeared while its groups formed
(:meth:`GlooSockets.track`), the peers' are exchanged once per generation. Nothing else (the
launcher's store, the liveness watchdog, the user's own connections) is touched.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from collections.abc import Iterator

__all__ = ["GlooSockets"]

log = logging.getLogger("hvdcore")

_LISTEN, _ESTABLISHED = "0A", "01"


def _socket_inodes() -> dict[int, int]:
    """inode -> fd of this process's sockets."""
    found: dict[int, int] = {}
    try:
        fds = os.listdir("/proc/self/fd")
    except OSError:
        return found
    for name in fds:
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue
        if target.startswith("socket:["):
            found[int(target[8:-1])] = int(name)
    return found


def _tcp() -> dict[int, tuple[int, int, str]]:
    """inode -> (local port, remote port, state) of this network namespace's TCP sockets."""
    table: dict[int, tuple[int, int, str]] = {}
    for path in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        try:
            with open(path) as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            if len(parts) < 10:
                continue
            local, remote, state, inode = parts[1], parts[2], parts[3], int(parts[9])
            table[inode] = (int(local.rsplit(":", 1)[1], 16), int(remote.rsplit(":", 1)[1], 16),
                            state)
    return table


class GlooSockets:
    """The Gloo listening ports of one generation, and the cut (see the module docstring)."""

    def __init__(self) -> None:
        self.mine: set[int] = set()
        self.peers: set[int] = set()

    @contextlib.contextmanager
    def track(self) -> Iterator[None]:
        """Note the listening ports that appear while the block runs (forming groups)."""
        before = set(_socket_inodes())
        try:
            yield
        finally:
            table = _tcp()
            for inode in set(_socket_inodes()) - before:
                entry = table.get(inode)
                if entry is not None and entry[2] == _LISTEN:
                    self.mine.add(entry[0])

    def cut(self) -> int:
        """Shut down every established connection with a Gloo port of the job at either end;
        returns how many."""
        ports = self.mine | self.peers
        if not ports:
            return 0
        table = _tcp()
        cut = 0
        for inode, fd in _socket_inodes().items():
            entry = table.get(inode)
            if entry is None or entry[2] != _ESTABLISHED:
                continue
            if entry[0] in self.mine or entry[1] in ports:
                try:
                    sock = socket.socket(fileno=os.dup(fd))
                except OSError:
                    continue
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                    cut += 1
                except OSError:
                    pass
                finally:
                    sock.close()
        log.debug("cut %d Gloo connection(s)", cut)
        return cut
