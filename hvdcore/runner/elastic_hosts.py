"""Where an elastic job may run: the host discovery script, and the hosts it must avoid.

The discovery script (``--host-discovery-script``, a shell command as in Horovod: ``sh
disc.sh`` or a script with arguments) prints one host per line, ``host:slots`` or ``host``
(then ``--slots-per-host`` slots); hvdcorerun runs it about once a second. A host on which a
worker failed is blacklisted: for good without ``--blacklist-cooldown-range MIN MAX``, else for
Horovod's cooldown (:func:`cooldown_seconds`: exponential backoff from MIN with jitter, never
above MAX), after which it is used again.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from hvdcore.errors import LaunchError
from hvdcore.runner.hosts import Host, HostSpecError, parse_host_list

__all__ = ["DiscoveryError", "Discovery", "FixedHosts", "SlurmNodes", "Blacklist",
           "cooldown_seconds", "check_cooldown_range", "COOLDOWN_LIMITS"]

_SCRIPT_TIMEOUT_S = 30.0
#: the bounds Horovod puts on --blacklist-cooldown-range's MIN and MAX (seconds)
COOLDOWN_LIMITS = (1.0, 3600.0)
_MAX_DOUBLINGS = 16  # 2**16 s is far above the largest MAX: more only risks a float overflow


def check_cooldown_range(lo: float, hi: float) -> None:
    """Horovod's check of ``--blacklist-cooldown-range``: ValueError when MIN is below 1 s or
    MAX above an hour (MIN above MAX is accepted: the cooldown is then always MIN)."""
    low, high = COOLDOWN_LIMITS
    if lo < low:
        raise ValueError(f"--blacklist-cooldown-range {lo:g} {hi:g}: MIN must be at least "
                         f"{low:g} s")
    if hi > high:
        raise ValueError(f"--blacklist-cooldown-range {lo:g} {hi:g}: MAX must be at most "
                         f"{high:g} s")


def cooldown_seconds(lo: float, hi: float, times: int, jitter: float) -> float:
    """The cooldown after a host's ``times``-th blacklisting (1, 2, ...) with ``jitter`` in
    [0, 1): ``lo`` doubled ``times`` times plus up to ``lo`` more, kept within [lo, hi], as
    Horovod's ``HostState`` computes it."""
    grown = lo * 2.0 ** min(times, _MAX_DOUBLINGS) + jitter * lo
    return max(lo, min(hi, grown))


class DiscoveryError(LaunchError):
    """The discovery script failed or printed something that is not a host list."""


class FixedHosts:
    """The hosts of ``-H``/``--hostfile`` (or ``localhost:np``), which never change."""

    def __init__(self, hosts: Sequence[Host]) -> None:
        self._hosts = list(hosts)

    def __call__(self) -> list[Host]:
        """The hosts."""
        return list(self._hosts)


class SlurmNodes:
    """The nodes of the Slurm allocation this launcher runs in (``scontrol show hostnames``),
    each with its tasks (``SLURM_TASKS_PER_NODE``) or ``slots_per_host`` slots."""

    def __init__(self, environ: Mapping[str, str], slots_per_host: int | None) -> None:
        nodelist = environ.get("SLURM_JOB_NODELIST") or environ.get("SLURM_NODELIST") or ""
        try:
            done = subprocess.run(["scontrol", "show", "hostnames", nodelist],
                                  capture_output=True, text=True, timeout=_SCRIPT_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise DiscoveryError(f"scontrol show hostnames {nodelist}: {exc}") from None
        nodes = done.stdout.split()
        if done.returncode != 0 or not nodes:
            raise DiscoveryError(f"the Slurm allocation's nodes ({nodelist!r}) could not be "
                                 f"listed: {done.stderr.strip()}")
        counts = _tasks_per_node(environ.get("SLURM_TASKS_PER_NODE", ""))
        self._hosts = [Host(n, slots_per_host or (counts[i] if i < len(counts) else 1))
                       for i, n in enumerate(nodes)]

    def __call__(self) -> list[Host]:
        """The allocation's nodes (they do not change; failed ones are blacklisted)."""
        return list(self._hosts)


def _tasks_per_node(text: str) -> list[int]:
    """``2(x3),1`` -> [2, 2, 2, 1] (Slurm's compressed SLURM_TASKS_PER_NODE)."""
    counts: list[int] = []
    for part in filter(None, text.split(",")):
        n, _, rep = part.partition("(x")
        counts.extend([int(n)] * (int(rep.rstrip(")")) if rep else 1))
    return counts


class Discovery:
    """The discovery script, a shell command (``/bin/sh -c``, as Horovod runs it) run on each
    call; its hosts in its order."""

    def __init__(self, script: str, slots_per_host: int | None) -> None:
        self.script = script
        self.slots_per_host = slots_per_host

    def _run(self) -> tuple[int, str, str]:
        try:
            # its own session: a timeout kills the shell and what it started, whose open
            # pipes would otherwise keep this call waiting
            proc = subprocess.Popen(self.script, shell=True, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                    start_new_session=True)
        except OSError as exc:
            raise DiscoveryError(f"host discovery script {self.script}: {exc}") from None
        try:
            out, err = proc.communicate(timeout=_SCRIPT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            proc.communicate()
            raise DiscoveryError(f"host discovery script {self.script}: no answer in "
                                 f"{_SCRIPT_TIMEOUT_S:g} s") from None
        return proc.returncode, out, err

    def __call__(self) -> list[Host]:
        """Run the script; :class:`DiscoveryError` naming it, its exit status and its
        stderr when it fails, or the line it could not read."""
        code, out, err = self._run()
        if code != 0:
            tail = " | ".join(err.strip().splitlines()[-3:])
            hint = " (the shell could not run it)" if code in (126, 127) else ""
            raise DiscoveryError(f"host discovery script {self.script} exited with status "
                                 f"{code}{hint}" + (f": {tail}" if tail else ""))
        hosts: list[Host] = []
        for line in out.splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            try:
                (host,) = parse_host_list(line)
            except (HostSpecError, ValueError) as exc:
                raise DiscoveryError(f"host discovery script {self.script} printed {line!r}: "
                                     f"{exc}") from None
            if ":" not in line:
                if self.slots_per_host is None:
                    raise DiscoveryError(
                        f"host discovery script {self.script} printed {line!r} without slots: "
                        "print host:slots, or give --slots-per-host")
                host = Host(host.name, self.slots_per_host)
            hosts.append(host)
        return hosts


@dataclass
class Blacklist:
    """Hosts where a worker failed, each until its cooldown ends (or for good)."""

    cooldown: tuple[float, float] | None = None
    clock: Callable[[], float] = time.monotonic
    rng: random.Random = field(default_factory=random.Random)
    _until: dict[str, float] = field(default_factory=dict)
    _count: dict[str, int] = field(default_factory=dict)

    def add(self, host: str) -> float:
        """Blacklist ``host``; returns the cooldown in seconds (``inf``: for good)."""
        n = self._count.get(host, 0) + 1
        self._count[host] = n
        if self.cooldown is None:
            wait = float("inf")
        else:
            wait = cooldown_seconds(*self.cooldown, n, self.rng.random())
        self._until[host] = self.clock() + wait
        return wait

    def blocked(self, host: str) -> bool:
        """True while ``host`` is blacklisted."""
        until = self._until.get(host)
        if until is None:
            return False
        if self.clock() >= until:
            del self._until[host]
            return False
        return True

    def for_good(self, host: str) -> bool:
        """True when ``host`` is blacklisted with no cooldown."""
        return self._until.get(host) == float("inf")

    def times(self, host: str) -> int:
        """How often ``host`` was blacklisted."""
        return self._count.get(host, 0)
