"""``hvdcorerun --gloo``: start the ranks without MPI, on the Gloo controller.

The launcher hosts the job's rendezvous (a torch.distributed ``TCPStore``), gives every rank
Horovod's variables (``HOROVOD_RANK/SIZE/LOCAL_RANK/LOCAL_SIZE/CROSS_RANK/CROSS_SIZE/HOSTNAME``,
``HOROVOD_GLOO_RENDEZVOUS_ADDR/PORT``, ``HOROVOD_CONTROLLER=gloo``), starts each rank on its host (a
host that names this machine, such as ``localhost``, ``127.0.0.1`` or its own name, as a local
process; any other over ``ssh``: :mod:`hvdcore.runner.remote`), prefixes each output line with
``[rank]<stdout>:`` / ``[rank]<stderr>:`` (also into per-rank files with ``--output-filename``:
:mod:`hvdcore.runner.worker_output`), and ends the job when a rank fails: the others get SIGTERM,
then SIGKILL, and one line names the rank and its exit code.
"""

from __future__ import annotations

import datetime
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from hvdcore.errors import LaunchError
from hvdcore.runner.hosts import Host
from hvdcore.runner.remote import SshOptions, ssh_command
from hvdcore.runner.worker_output import RankFile, Sink, TerminalTag, pump

__all__ = ["RankPlace", "plan", "is_local", "iface_address", "run_gloo_job"]

_GRACE_S = 5.0


@dataclass(frozen=True)
class RankPlace:
    """Where one rank runs and its place among the ranks (Horovod's numbering)."""

    rank: int
    host: str
    local_rank: int
    local_size: int
    cross_rank: int
    cross_size: int

    def horovod_env(self, size: int) -> dict[str, str]:
        """Horovod's variables of this rank in a job of ``size`` ranks."""
        return {"HOROVOD_RANK": str(self.rank), "HOROVOD_SIZE": str(size),
                "HOROVOD_LOCAL_RANK": str(self.local_rank),
                "HOROVOD_LOCAL_SIZE": str(self.local_size),
                "HOROVOD_CROSS_RANK": str(self.cross_rank),
                "HOROVOD_CROSS_SIZE": str(self.cross_size), "HOROVOD_HOSTNAME": self.host}


def plan(hosts: Sequence[Host], np: int) -> list[RankPlace]:
    """Ranks 0..np-1 filling the hosts' slots in order (Horovod's block placement)."""
    names: list[str] = []
    for h in hosts:
        names.extend([h.name] * h.slots)
    names = names[:np]
    per_host = {n: names.count(n) for n in dict.fromkeys(names)}
    places, seen = [], {n: 0 for n in per_host}
    for r, n in enumerate(names):
        local = seen[n]
        seen[n] += 1
        cross = [h for h in per_host if per_host[h] > local]
        places.append(RankPlace(r, n, local, per_host[n], cross.index(n), len(cross)))
    return places


def _own_names() -> set[str]:
    names = {"localhost", "127.0.0.1", "::1", socket.gethostname(), socket.getfqdn()}
    try:
        names.update(socket.gethostbyname_ex(socket.gethostname())[2])
    except OSError:
        pass
    return names


def is_local(host: str, own: set[str] | None = None) -> bool:
    """True when ``host`` names this machine (started without ssh)."""
    return host in (own if own is not None else _own_names()) or host.startswith("127.")


def _address(places: Sequence[RankPlace], iface_addr: str | None) -> str:
    if iface_addr:
        return iface_addr
    own = _own_names()
    if all(is_local(p.host, own) for p in places):
        return "127.0.0.1"
    return socket.gethostbyname(socket.gethostname())


def iface_address(ifaces: str) -> str:
    """The IPv4 address of the first of ``ifaces`` (one name or Horovod's comma list, e.g.
    ``lo,eth0``); LaunchError naming one this machine lacks."""
    from hvdcore.netaddr import local_interfaces

    have = {str(i.name): str(i.address) for i in local_interfaces()}
    names = [n.strip() for n in ifaces.split(",") if n.strip()]
    for name in names or [ifaces]:
        if name not in have:
            raise LaunchError(f"--network-interfaces {ifaces}: {name!r} is no interface with "
                              f"an IPv4 address on this machine (it has: "
                              f"{', '.join(sorted(have)) or 'none'})")
    return have[names[0]]


def run_gloo_job(places: Sequence[RankPlace], command: Sequence[str], environ: Mapping[str, str],
                 exports: Mapping[str, str], timeout_s: float, iface: str | None,
                 ssh: SshOptions | None = None, *, output_dir: str | None = None,
                 timestamps: bool = False, tag_output: bool = True) -> int:
    """Run ``command`` on every rank of ``places`` (see the module docstring); the exit code.
    ``output_dir``/``timestamps``: horovodrun's ``--output-filename``/``-prefix-timestamp``;
    ``tag_output``: the ``[rank]<stdout>:`` tags on the terminal (``--no-tag-output``)."""
    import torch.distributed as dist  # the store the ranks meet at

    addr = _address(places, iface_address(iface) if iface else None)
    bind = addr if addr.startswith("127.") else "0.0.0.0"
    store = dist.TCPStore(bind, 0, len(places), True, datetime.timedelta(seconds=timeout_s),
                          wait_for_workers=False)
    own = _own_names()
    procs: list[subprocess.Popen[bytes]] = []
    lock = threading.Lock()
    pumps: list[threading.Thread] = []
    for p in places:
        env = {**environ, **exports, **p.horovod_env(len(places)),
               "HOROVOD_CONTROLLER": "gloo", "HVDCORE_CONTROLLER": "gloo",
               "HOROVOD_GLOO_RENDEZVOUS_ADDR": addr,
               "HOROVOD_GLOO_RENDEZVOUS_PORT": str(store.port)}
        if iface:
            env.setdefault("GLOO_SOCKET_IFNAME", iface)
        local = is_local(p.host, own)
        cmd = (list(command) if local
               else ssh_command(p.host, command, env, os.getcwd(), ssh))
        try:
            # a remote rank runs while its ssh's stdin is open (closed when this process ends)
            proc = subprocess.Popen(cmd, env=env, stdin=None if local else subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    start_new_session=True)
        except OSError as exc:  # a program that is not there: one line, the others stopped
            print(f"hvdcorerun: cannot start rank {p.rank} ({cmd[0]}): {exc}", file=sys.stderr,
                  flush=True)
            _stop(procs, signal.SIGKILL)
            return 127
        procs.append(proc)
        for stream, kind, out in ((proc.stdout, "stdout", sys.stdout.buffer),
                                  (proc.stderr, "stderr", sys.stderr.buffer)):
            sinks: tuple[Sink, ...] = (TerminalTag(out, kind, lock, tag_output, p.rank),)
            if output_dir:
                sinks += (RankFile(output_dir, len(places), kind, p.rank),)
            t = threading.Thread(target=pump, args=(stream, sinks, timestamps), daemon=True)
            t.start()
            pumps.append(t)
    return _supervise(procs, pumps)


def _stop(procs: Sequence[subprocess.Popen[bytes]], sig: int) -> None:
    for proc in procs:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass


def _supervise(procs: Sequence[subprocess.Popen[bytes]], pumps: Sequence[threading.Thread]
               ) -> int:
    received: list[int] = []

    def forward(signum: int, frame: object) -> None:
        received.append(signum)
        _stop(procs, signal.SIGKILL if len(received) >= 3 else signum)

    main = threading.current_thread() is threading.main_thread()
    previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)} \
        if main else {}
    # One thread per rank waits for its exit and notes when: the rank that failed first is
    # the culprit, not the lowest rank among those found dead by one poll (peers of a dead
    # rank fail a few milliseconds after it, on Gloo's closed connection)
    exits: list[tuple[float, int, int]] = []
    lock = threading.Lock()

    def wait(rank: int, proc: subprocess.Popen[bytes]) -> None:
        code = proc.wait()
        with lock:
            exits.append((time.monotonic(), rank, code))

    for rank, proc in enumerate(procs):
        threading.Thread(target=wait, args=(rank, proc), daemon=True).start()
    failed: tuple[int, int] | None = None
    try:
        while True:
            with lock:
                done = len(exits)
                bad = next(((r, c) for _, r, c in sorted(exits) if c != 0), None)
            if bad is not None:
                failed = bad
                _stop(procs, signal.SIGTERM)
                deadline = time.monotonic() + _GRACE_S
                while any(q.poll() is None for q in procs) and time.monotonic() < deadline:
                    time.sleep(0.05)
                _stop(procs, signal.SIGKILL)
                for q in procs:
                    q.wait()
                break
            if done == len(procs):
                break
            time.sleep(0.02)
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
    for t in pumps:
        t.join(timeout=5)
    if failed is None:
        failed = next(((r, p.returncode) for r, p in enumerate(procs) if p.returncode), None)
    if failed is None:
        return 0
    rank, code = failed
    shown = 128 - code if code < 0 else code
    how = f"was killed by signal {-code}" if code < 0 else f"exited with exit code {code}"
    print(f"hvdcorerun: job failed: rank {rank} {how}; the other ranks were stopped",
          file=sys.stderr, flush=True)
    return shown
