"""The Gloo controller's cache rounds on TCP connections of their own.

A cache round is a bitwise-or allreduce of a few hundred bytes, made once per engine cycle and
once per steady call: the hot path's fixed cost. On a ``torch.distributed`` Gloo group it costs
what a Gloo collective costs (the call goes through the group's worker thread, then Gloo's
device thread: on a 2-core VM about 300 us for a 4 KiB allreduce, against a 75 us TCP round
trip), and a Gloo ``Work`` cannot be waited on with a timeout. Here the round is a
dissemination allreduce: in step ``k`` (``k < ceil(log2 n)``) rank ``r`` sends what it has
so far to ``r + 2**k`` and ors in what ``r - 2**k`` sent; bitwise or is idempotent, so after
the last step every rank holds the or of all. Each step has its own connection per direction,
made once when the job forms; each message is a 4-byte length, a kind (a round, or data) and
the body. :meth:`RoundMesh.allgather` uses the same connections for small host allreduces
(:mod:`hvdcore.controllers.gloo_host`).

The sends are a few hundred bytes into an empty socket buffer (a peer is at most one round
ahead), so they never block; the receives are non-blocking, so :meth:`RoundRequest.Test
<hvdcore.backends.base.RoundRequest.Test>` never blocks either. A peer that ends or leaves the
job closes its connections: the round raises :class:`RoundMeshError` naming it.
"""

from __future__ import annotations

import collections
import ipaddress
import os
import select
import socket
import struct
import time
from typing import Any

import numpy as np

__all__ = ["RoundMesh", "RoundMeshError", "advertised_address"]

_HEAD = struct.Struct("!IB")  # (body length, kind)
_ROUND, _DATA = 0, 1  # a round's words; an allgather's blocks
_HELLO = struct.Struct("!ii")  # (sender rank, step)


class RoundMeshError(ConnectionError):
    """A round's connection failed: a peer ended, or left the job."""


def advertised_address(store_addr: str, several_hosts: bool = False) -> str:
    """The address peers reach this rank's round listener at: the address of Gloo's interface
    (``GLOO_SOCKET_IFNAME``, its first name) when set, else this host's address on the route
    to the rendezvous store (the store is reachable from every rank, so is that route). When
    that is a loopback address (the store is on this host, or its name resolves to 127.0.1.1
    as Debian's ``/etc/hosts`` has it) and the job has ranks on ``several_hosts``, this host's
    first address that is not loopback."""
    from hvdcore.netaddr import local_interfaces

    names = [n for n in os.environ.get("GLOO_SOCKET_IFNAME", "").split(",") if n]
    if names:
        for item in local_interfaces():
            if item.name == names[0]:
                return str(item.address)
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect((socket.gethostbyname(store_addr), 9))  # no packet: UDP only routes
        address: str = probe.getsockname()[0]
    finally:
        probe.close()
    if several_hosts and ipaddress.ip_address(address).is_loopback:
        outside = [i.address for i in local_interfaces() if not i.loopback]
        if outside:
            return outside[0]
    return address


def _steps(size: int) -> int:
    return (size - 1).bit_length()


class RoundMesh:
    """The connections of one job's rounds (see the module docstring)."""

    def __init__(self, rank: int, size: int, store: Any, address: str, timeout_s: float,
                 listen: socket.socket | None = None) -> None:
        """Collective: listen, publish ``address:port`` under ``mesh/<rank>`` in ``store``,
        connect to each step's destination and accept each step's source, within
        ``timeout_s`` (RoundMeshError naming the rank that did not come). ``listen``: a
        listening socket made by the caller (for instance where its port must be noted)."""
        self.rank, self.size = rank, size
        steps = _steps(size)
        self._out: list[socket.socket] = []
        self._in: list[socket.socket] = [None] * steps  # type: ignore[list-item]
        self._pending: list[bytearray] = [bytearray() for _ in range(steps)]
        # messages read but not asked for yet, by step and kind (rounds and data calls keep
        # each their own order on every rank, not necessarily their order between the two)
        self._queued: list[tuple[collections.deque, collections.deque]] = [
            (collections.deque(), collections.deque()) for _ in range(steps)]
        self.timeout_s = timeout_s
        self._sources = [(rank - (1 << k)) % size for k in range(steps)]
        if steps == 0:
            return
        server = listen or RoundMesh.listener()
        try:
            store.set(f"mesh/{rank}", f"{address}:{server.getsockname()[1]}")
            deadline = time.monotonic() + timeout_s
            for k in range(steps):
                dest = (rank + (1 << k)) % size
                while not store.check([f"mesh/{dest}"]):
                    if time.monotonic() > deadline:
                        raise RoundMeshError(
                            f"rank {rank}: rank {dest} did not publish its cache-round address "
                            f"within {timeout_s:g} s (HVDCORE_RENDEZVOUS_TIMEOUT)")
                    time.sleep(0.005)
                host, port = store.get(f"mesh/{dest}").decode().rsplit(":", 1)
                sock = socket.create_connection((host, int(port)),
                                                timeout=max(deadline - time.monotonic(), 0.1))
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                sock.settimeout(None)
                sock.sendall(_HELLO.pack(rank, k))
                self._out.append(sock)
            for _ in range(steps):
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([server], [], [], left)[0]:
                    missing = [self._sources[k] for k in range(steps) if self._in[k] is None]
                    raise RoundMeshError(
                        f"rank {rank}: ranks {missing} did not connect for the cache rounds "
                        f"within {timeout_s:g} s (HVDCORE_RENDEZVOUS_TIMEOUT); is "
                        f"{address} reachable from them (GLOO_SOCKET_IFNAME)?")
                sock, _ = server.accept()
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                sock.settimeout(max(left, 0.1))
                src, k = _HELLO.unpack(_recv_exact(sock, _HELLO.size))
                if not 0 <= k < steps or src != self._sources[k] or self._in[k] is not None:
                    raise RoundMeshError(f"rank {rank}: unexpected round connection from "
                                         f"rank {src} for step {k}")
                sock.setblocking(False)
                self._in[k] = sock
        except RoundMeshError:
            self.close()
            raise
        except Exception as exc:  # the store or a connection failed: one clear error
            self.close()
            raise RoundMeshError(f"rank {rank}: the cache rounds' connections could not be "
                                 f"made: {type(exc).__name__}: "
                                 f"{(str(exc).strip().splitlines() or [''])[0]}") from exc
        except BaseException:
            self.close()
            raise
        finally:
            server.close()

    @staticmethod
    def listener() -> socket.socket:
        """A listening TCP socket on every address, on a free port."""
        server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        server.bind(("0.0.0.0", 0))
        server.listen(64)
        return server

    def start(self, send: bytearray, recv: bytearray) -> _MeshRound:
        """Start a bitwise-or allreduce of the uint64 words of ``send`` into ``recv``."""
        return _MeshRound(self, send, recv)

    def _send(self, step: int, body: bytes, kind: int = _ROUND) -> None:
        try:
            self._out[step].sendall(_HEAD.pack(len(body), kind) + body)
        except OSError as exc:
            dest = (self.rank + (1 << step)) % self.size
            raise RoundMeshError(f"rank {self.rank}: the cache round's connection to rank "
                                 f"{dest} failed ({exc}): it ended or left the job") from exc

    def _take(self, step: int, kind: int = _ROUND) -> bytes | None:
        """Step ``step``'s next message of ``kind``, or None when it has not arrived yet."""
        queued = self._queued[step]
        if queued[kind]:
            return queued[kind].popleft()
        buf = self._pending[step]
        while True:
            while len(buf) >= _HEAD.size:
                size, got = _HEAD.unpack_from(buf)
                need = _HEAD.size + size
                if len(buf) < need:
                    break
                msg = bytes(buf[_HEAD.size:need])
                del buf[:need]
                if got == kind:
                    return msg
                queued[got].append(msg)
            try:
                chunk = self._in[step].recv(1 << 20)
            except (BlockingIOError, InterruptedError):
                return None
            except OSError as exc:
                raise self._lost(step, str(exc)) from exc
            if not chunk:
                raise self._lost(step, "end of stream")
            buf += chunk

    def allgather(self, block: bytes) -> list[bytes]:
        """Every rank's ``block`` (all of one length), in rank order: Bruck's allgather on the
        round's connections, in ``ceil(log2 n)`` steps (in step ``k`` this rank sends the
        blocks it has, of ranks ``r, r-1, ...``, to ``r + 2**k``). Blocks until done; a peer
        that ends raises RoundMeshError, one that sends nothing for ``timeout_s`` too."""
        n, width = self.size, len(block)
        have = bytearray(block)  # blocks of ranks r, r-1, r-2, ... (mod n)
        for k in range(len(self._in)):
            count = min(1 << k, n - (1 << k))
            self._send(k, bytes(have[:count * width]), _DATA)
            end = time.monotonic() + self.timeout_s
            while (msg := self._take(k, _DATA)) is None:
                left = end - time.monotonic()
                if left <= 0:
                    raise RoundMeshError(
                        f"rank {self.rank}: rank {self._sources[k]} sent no data within "
                        f"{self.timeout_s:g} s (HVDCORE_RENDEZVOUS_TIMEOUT)")
                select.select([self._in[k]], [], [], left)
            have += msg
        blocks = [bytes(have[i * width:(i + 1) * width]) for i in range(n)]
        return [blocks[(self.rank - q) % n] for q in range(n)]

    def _lost(self, step: int, why: str) -> RoundMeshError:
        return RoundMeshError(f"rank {self.rank}: the cache round's connection from rank "
                              f"{self._sources[step]} closed ({why}): it ended or left the job")

    def close(self) -> None:
        """Close every connection (a peer's round in flight fails at once)."""
        for sock in [*self._out, *self._in]:
            if sock is not None:
                sock.close()
        self._out = []
        self._in = [None] * len(self._in)  # type: ignore[list-item]


class _MeshRound:
    """One round in flight: :class:`~hvdcore.backends.base.RoundRequest`."""

    __slots__ = ("_mesh", "_acc", "_recv", "_step")

    def __init__(self, mesh: RoundMesh, send: bytearray, recv: bytearray) -> None:
        self._mesh = mesh
        self._acc = np.frombuffer(send, dtype=np.uint64).copy()
        self._recv = recv
        self._step = 0
        if mesh._in:
            mesh._send(0, self._acc.tobytes())

    def Test(self) -> bool:  # noqa: N802 - RoundRequest's name
        """True once every step arrived (``recv`` then holds the result); never blocks."""
        mesh, steps = self._mesh, len(self._mesh._in)
        while self._step < steps:
            msg = mesh._take(self._step)
            if msg is None:
                return False
            np.bitwise_or(self._acc, np.frombuffer(msg, dtype=np.uint64), out=self._acc)
            self._step += 1
            if self._step < steps:
                mesh._send(self._step, self._acc.tobytes())
        if self._step == steps:
            self._recv[:] = self._acc.tobytes()
            self._step += 1
        return True

    def wait(self, timeout_s: float) -> bool:
        """:meth:`Test` until it completes or ``timeout_s`` passed, asleep in ``select`` while
        the step's message has not arrived (no core spins: on a small host the peers and
        the data plane's threads need them)."""
        end = time.perf_counter() + timeout_s
        while not self.Test():
            left = end - time.perf_counter()
            if left <= 0:
                return False
            select.select([self._mesh._in[self._step]], [], [], left)
        return True


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise RoundMeshError("a round connection closed while the job formed")
        data += chunk
    return data
