"""Peer liveness watchdog: notice at once that another rank's process died, and end the job.

Open MPI (without ULFM) never completes a collective whose peer has died. Launchers that kill
the whole job when one rank dies (``mpirun``, ``srun --kill-on-bad-exit``) hide this, but under
Slurm's default (``KillOnBadExit=0``) the ranks that survive would wait inside MPI forever, and
hvdcore's stall check cannot help because it runs between collectives, not inside them.

So every rank keeps one TCP connection to rank 0 (a star opened by :func:`start` during
``init``). The kernel closes a process's sockets when it dies, also on SIGKILL, so the other
end sees end-of-file at once. A rank that ends normally first sends ``B`` (bye) from
``shutdown``. Rank 0 tells the others which rank died (``D`` + rank); a rank that loses its
connection to rank 0 without a bye knows that rank 0 died. The rank that notices logs one line
naming the dead rank, gives the launcher a moment to end the job its own way (``mpirun``
reports the dead rank itself), then closes its timeline and calls ``MPI_Abort``.

If rank 0 cannot be reached over TCP (a firewalled site), the watchdog is off on that rank and
a warning says so; the job runs as before.
"""

from __future__ import annotations

import logging
import os
import secrets
import select
import socket
import struct
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["Watchdog", "start"]

log = logging.getLogger("hvdcore")

#: Seconds a rank waits, after noticing a dead peer, for the launcher to end the job itself.
GRACE_S = 2.0
#: Seconds MPI_Abort may take before the process exits by itself.
ABORT_TIMEOUT_S = 10.0
_CONNECT_TIMEOUT_S = 10.0
_POLL_S = 0.5
_HELLO = struct.Struct("!i16s")


class Watchdog:
    """One rank's side of the liveness star (see the module docstring)."""

    def __init__(self, rank: int, size: int, pids: list[tuple[int, str]],
                 on_dead: Callable[[str], None]) -> None:
        self.rank = rank
        self.size = size
        self.pids = pids
        self._on_dead = on_dead
        self._listener: socket.socket | None = None
        self._token = b""
        self._peers: dict[socket.socket, int] = {}  # socket -> peer rank (rank 0: clients)
        self._bye: set[int] = set()
        self._closing = False
        self._fired = False
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        # close() wakes the thread through this pair: a rank whose peers are gone (the survivor
        # of an elastic 2 -> 1 shrink) would otherwise wait out a whole select timeout
        self._wake: tuple[socket.socket, socket.socket] | None = None

    # -- set-up ------------------------------------------------------------------------------

    def listen(self) -> tuple[list[str], int, bytes]:
        """Rank 0: open the listening socket; returns (addresses, port, token) for the others."""
        self._token = secrets.token_bytes(16)
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.bind(("0.0.0.0", 0))
        self._listener.listen(max(16, self.size))
        port = self._listener.getsockname()[1]
        addrs: list[str] = []
        try:
            host = socket.gethostname()
            addrs = sorted({str(a[4][0]) for a in socket.getaddrinfo(host, None, socket.AF_INET)})
        except OSError:
            pass
        return [*addrs, "127.0.0.1"], port, self._token

    def connect(self, addrs: list[str], port: int, token: bytes) -> bool:
        """Ranks > 0: connect to rank 0 and introduce this rank; False if unreachable."""
        errs = []
        for addr in addrs:
            try:
                sock = socket.create_connection((addr, port), timeout=_CONNECT_TIMEOUT_S)
                sock.sendall(_HELLO.pack(self.rank, token))
                sock.settimeout(None)
            except OSError as exc:
                errs.append(f"{addr}:{port}: {exc}")
                continue
            self._peers[sock] = 0
            return True
        log.warning("peer liveness watchdog off on rank %d: cannot reach rank 0 (%s); a dead "
                    "rank may then leave this one waiting until the launcher ends the job",
                    self.rank, "; ".join(errs))
        return False

    def run(self) -> None:
        """Start the watchdog thread."""
        self._wake = socket.socketpair()
        self._thread = threading.Thread(target=self._loop, name="hvdcore-liveness", daemon=True)
        self._thread.start()

    # -- shutdown ----------------------------------------------------------------------------

    def close(self) -> None:
        """Normal end of this rank: say bye to every connected peer and close the sockets."""
        with self._lock:
            self._closing = True
            for sock in list(self._peers):
                try:
                    sock.sendall(b"B")
                except OSError:
                    pass
            try:
                if self._wake is not None:
                    self._wake[1].send(b"w")
            except OSError:
                pass  # closed by an earlier close()
        if self._thread is not None:
            self._thread.join(2 * _POLL_S + 1.0)
        for sock in [*self._peers, *([self._listener] if self._listener else []),
                     *(self._wake or ())]:
            try:
                sock.close()
            except OSError:
                pass
        self._peers.clear()

    # -- watchdog thread ---------------------------------------------------------------------

    def _describe(self, rank: int) -> str:
        pid, host = self.pids[rank] if 0 <= rank < len(self.pids) else (0, "?")
        return f"rank {rank} (pid {pid} on {host})"

    def _loop(self) -> None:
        pending: dict[socket.socket, bytes] = {}  # rank 0: accepted, hello not complete yet
        while not self._closing:
            socks = list(self._peers) + list(pending)
            if self._listener is not None:
                socks.append(self._listener)
            if self._wake is not None:
                socks.append(self._wake[0])
            try:
                ready, _, _ = select.select(socks, [], [], _POLL_S)
            except (OSError, ValueError):
                if self._closing:
                    return
                raise
            for sock in ready:
                if self._closing:
                    return
                if self._wake is not None and sock is self._wake[0]:
                    sock.recv(64)  # (close() sets _closing before it wakes the thread)
                    continue
                if sock is self._listener:
                    try:
                        conn, _ = sock.accept()
                        pending[conn] = b""
                    except OSError:
                        pass
                elif sock in pending:
                    self._hello(sock, pending)
                else:
                    self._receive(sock)

    def _hello(self, sock: socket.socket, pending: dict[socket.socket, bytes]) -> None:
        try:
            data = sock.recv(_HELLO.size - len(pending[sock]))
        except OSError:
            data = b""
        if not data:
            pending.pop(sock, None)  # a stray connection that went away
            sock.close()
            return
        pending[sock] += data
        if len(pending[sock]) < _HELLO.size:
            return
        rank, token = _HELLO.unpack(pending.pop(sock))
        if token != self._token or not 0 < rank < self.size:
            sock.close()  # not one of ours
            return
        self._peers[sock] = rank

    def _receive(self, sock: socket.socket) -> None:
        peer = self._peers[sock]
        try:
            data = sock.recv(64)
        except OSError:
            data = b""
        i = 0
        while i < len(data):
            kind = data[i:i + 1]
            if kind == b"B":
                self._bye.add(peer)
                i += 1
            elif kind == b"D" and len(data) >= i + 5:
                dead = struct.unpack("!i", data[i + 1:i + 5])[0]
                self._fire(dead, "rank 0 saw its connection close")
                i += 5
            else:
                i += 1
        if data:
            return
        del self._peers[sock]
        sock.close()
        if peer not in self._bye and not self._closing:
            self._fire(peer, "its connection to the liveness watchdog closed")

    def _fire(self, dead: int, how: str) -> None:
        with self._lock:
            if self._fired or self._closing:
                return
            self._fired = True
            if self.rank == 0:  # tell every other rank which rank died
                msg = b"D" + struct.pack("!i", dead)
                for sock in list(self._peers):
                    try:
                        sock.sendall(msg)
                    except OSError:
                        pass
        self._on_dead(f"{self._describe(dead)} is gone: its process ended without "
                      f"hvd.shutdown() ({how})")


def start(world: Any, rank: int, size: int, on_dead: Callable[[str], None]) -> Watchdog | None:
    """Open the liveness star over ``world`` (collective: every rank calls it during init)."""
    if size < 2:
        return None
    pids = world.allgather((os.getpid(), socket.gethostname()))
    dog = Watchdog(rank, size, pids, on_dead)
    info = dog.listen() if rank == 0 else None
    addrs, port, token = world.bcast(info, root=0)
    if rank != 0 and not dog.connect(addrs, port, token):
        return None
    dog.run()
    return dog


#: Set when this process's watchdog saw a peer's process end (a non-elastic job is ending).
peer_lost = threading.Event()


def raised_by_hvdcore(tb: Any) -> bool:
    """Whether a traceback passes through hvdcore's code (a call into hvdcore raised)."""
    while tb is not None:
        if tb.tb_frame.f_globals.get("__name__", "").startswith("hvdcore."):
            return True
        tb = tb.tb_next
    return False


def victim_of_a_dead_peer(tb: Any) -> bool:
    """An uncaught error on a rank of a multi-rank job: is it the echo of a peer's death?

    When a peer's process dies, the transport fails this rank's pending call (Gloo: "Connection
    reset by peer") about when the watchdog notices; aborting at once could end this rank
    before the dead one is reaped, and the launcher would name this rank and its exit code 1
    instead of the culprit's. So an error raised inside an hvdcore call waits up to
    :data:`GRACE_S` for the watchdog's verdict; True when a peer was lost (then the watchdog's
    :func:`abort_job` ends the job after its grace). An error raised outside hvdcore (the
    script's own bug) is not waited for."""
    return raised_by_hvdcore(tb) and peer_lost.wait(GRACE_S)


def abort_job(world: Any, message: str, before_abort: Callable[[], None]) -> None:
    """What a rank does when its watchdog fires: log, let the launcher act, then MPI_Abort."""
    peer_lost.set()
    log.error("%s; ending the job (MPI_Abort in %.0f s unless the launcher ends it first)",
              message, GRACE_S)
    time.sleep(GRACE_S)
    try:
        before_abort()
    finally:
        killer = threading.Timer(ABORT_TIMEOUT_S, os._exit, (1,))
        killer.daemon = True
        killer.start()
        world.Abort(1)
