"""Where a Gloo-controller rank finds its place in the job: the launchers' variables.

Read in this order (the first that applies wins):

1. ``hvdcorerun --gloo`` / ``horovodrun --gloo``: ``HOROVOD_RANK``, ``HOROVOD_SIZE``,
   ``HOROVOD_LOCAL_RANK/LOCAL_SIZE/CROSS_RANK/CROSS_SIZE`` and the launcher's store at
   ``HOROVOD_GLOO_RENDEZVOUS_ADDR:HOROVOD_GLOO_RENDEZVOUS_PORT``.
2. ``torchrun``: ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``GROUP_RANK``,
   ``MASTER_ADDR:MASTER_PORT`` (the agent's store when ``TORCHELASTIC_USE_AGENT_STORE`` is
   True, else rank 0's).
3. ``srun`` (with or without PMI): ``SLURM_PROCID``, ``SLURM_NTASKS``, ``SLURM_LOCALID``,
   ``SLURM_NODEID``; rank 0's store on the first node of ``SLURM_STEP_NODELIST`` (Slurm's
   default block distribution puts task 0 there) at a port derived from the job and step ids,
   unless ``MASTER_ADDR`` / ``MASTER_PORT`` say otherwise.
4. A lone process: rank 0 of 1, its own store on loopback.
"""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from hvdcore.errors import ConfigError

__all__ = ["LaunchInfo", "read", "expand_hostlist"]


@dataclass(frozen=True)
class LaunchInfo:
    """This rank's place in the job and where the rendezvous store is."""

    rank: int
    size: int
    addr: str
    port: int  # 0: any free port (a lone process)
    store_here: bool  # this process hosts the store (rank 0, unless a launcher does)
    launcher: str  # who started the rank, in words
    source: str  # the variables the address came from
    local_rank: int | None = None
    local_size: int | None = None
    cross_rank: int | None = None
    cross_size: int | None = None
    prefix: str = ""  # where this job's keys live in the store ("": the init's own)
    superseded: Callable[[], bool] | None = None  # elastic: a newer generation replaced this


def _int(env: Mapping[str, str], name: str) -> int | None:
    raw = env.get(name)
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not an integer") from None


def _need(env: Mapping[str, str], name: str, launcher: str) -> int:
    value = _int(env, name)
    if value is None:
        raise ConfigError(f"{launcher} started this rank but {name} is not set")
    return value


def expand_hostlist(text: str) -> list[str]:
    """Slurm's compressed host list (``node[01-03,7],login``) as names, in order."""
    hosts: list[str] = []
    for part in re.findall(r"[^,\[]+(?:\[[^\]]*\])?[^,]*", text):
        m = re.fullmatch(r"([^\[]*)\[([^\]]*)\](.*)", part)
        if not m:
            hosts.append(part)
            continue
        prefix, ranges, suffix = m.groups()
        for item in ranges.split(","):
            lo, _, hi = item.partition("-")
            for n in range(int(lo), int(hi or lo) + 1):
                hosts.append(f"{prefix}{str(n).zfill(len(lo))}{suffix}")
    return hosts


def node_address(name: str) -> str:
    """``name`` if it resolves, else the node's ``NodeAddr`` from ``scontrol`` (Slurm node
    names need not be host names), else ``name`` (the store's error will name it)."""
    try:
        socket.getaddrinfo(name, None)
        return name
    except OSError:
        pass
    scontrol = shutil.which("scontrol")
    if scontrol:
        try:
            out = subprocess.run([scontrol, "show", "node", "-o", name], capture_output=True,
                                 text=True, timeout=20).stdout
        except (OSError, subprocess.SubprocessError):
            out = ""
        m = re.search(r"\bNodeAddr=(\S+)", out)
        if m:
            return m.group(1)
    return name


def _port(env: Mapping[str, str], name: str) -> int:
    port = _int(env, name)
    if port is None or not 0 < port < 65536:
        raise ConfigError(f"{name}={env.get(name)!r} is not a TCP port (1-65535)")
    return port


def read(env: Mapping[str, str]) -> LaunchInfo:
    """This rank's :class:`LaunchInfo` from the environment (rules in the module docstring)."""
    if "HOROVOD_GLOO_RENDEZVOUS_ADDR" in env:
        who = "hvdcorerun --gloo"
        return LaunchInfo(
            _need(env, "HOROVOD_RANK", who), _need(env, "HOROVOD_SIZE", who),
            env["HOROVOD_GLOO_RENDEZVOUS_ADDR"], _port(env, "HOROVOD_GLOO_RENDEZVOUS_PORT"),
            False, who, "HOROVOD_GLOO_RENDEZVOUS_ADDR/PORT",
            _int(env, "HOROVOD_LOCAL_RANK"), _int(env, "HOROVOD_LOCAL_SIZE"),
            _int(env, "HOROVOD_CROSS_RANK"), _int(env, "HOROVOD_CROSS_SIZE"))
    if "RANK" in env and "WORLD_SIZE" in env and "MASTER_ADDR" in env:
        who = "torchrun" if "TORCHELASTIC_RUN_ID" in env else "RANK/WORLD_SIZE/MASTER_ADDR"
        rank, size = _need(env, "RANK", who), _need(env, "WORLD_SIZE", who)
        agent = env.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true"
        local_size = _int(env, "LOCAL_WORLD_SIZE")
        return LaunchInfo(rank, size, env["MASTER_ADDR"], _port(env, "MASTER_PORT"),
                          rank == 0 and not agent, who, "MASTER_ADDR/MASTER_PORT",
                          _int(env, "LOCAL_RANK"), local_size, _int(env, "GROUP_RANK"),
                          size // local_size if local_size else None)
    if "SLURM_PROCID" in env and "SLURM_NTASKS" in env:
        who = "srun"
        rank, size = _need(env, "SLURM_PROCID", who), _need(env, "SLURM_NTASKS", who)
        if env.get("MASTER_ADDR"):
            addr, source = env["MASTER_ADDR"], "MASTER_ADDR"
        else:
            nodes = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or ""
            hosts = expand_hostlist(nodes)
            if not hosts:
                raise ConfigError("srun started this rank but neither SLURM_STEP_NODELIST nor "
                                  "MASTER_ADDR names the node of rank 0")
            addr, source = node_address(hosts[0]), "the first node of SLURM_STEP_NODELIST"
        if env.get("MASTER_PORT"):
            port, source = _port(env, "MASTER_PORT"), source + ", MASTER_PORT"
        else:
            job, step = _int(env, "SLURM_JOB_ID") or 0, _int(env, "SLURM_STEP_ID") or 0
            port = 20000 + (job * 64 + step) % 20000
            source += ", a port from SLURM_JOB_ID/SLURM_STEP_ID"
        nodes_n = _int(env, "SLURM_STEP_NUM_NODES") or _int(env, "SLURM_NNODES")
        return LaunchInfo(rank, size, addr, port, rank == 0, who, source,
                          _int(env, "SLURM_LOCALID"), None, _int(env, "SLURM_NODEID"), nodes_n)
    return LaunchInfo(0, 1, "127.0.0.1", 0, True, "a lone process", "loopback")
