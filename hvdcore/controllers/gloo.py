"""The Gloo controller: hvdcore without MPI, on torch.distributed.

The job is formed at a TCPStore (see :mod:`hvdcore.controllers.gloo_env` for where each
launcher puts it); every rank checks in there, so a rank that disagrees on the job's size or
claims a taken rank fails at once with both sides named, and an unreachable store fails within
``HVDCORE_RENDEZVOUS_TIMEOUT`` naming the address and where it came from. Then a Gloo default
group (with NCCL/RCCL beside it where GPUs are), private Gloo groups (one for the global set's
host data, one for the controller's own collectives) and the response cache's round mesh
(:mod:`hvdcore.controllers.round_mesh`).
"""

from __future__ import annotations

import datetime
import importlib.util
import logging
import os
import socket
import sys
import time
from collections.abc import Callable
from typing import Any

from hvdcore.controllers import elastic_env, gloo_env
from hvdcore.controllers.base import Formed
from hvdcore.controllers.gloo_sockets import GlooSockets
from hvdcore.controllers.round_mesh import RoundMesh, advertised_address
from hvdcore.errors import CapabilityError, ConfigError, RendezvousError

__all__ = ["GlooController", "GlooWorld"]

log = logging.getLogger("hvdcore")
_generation = 0  # inits of this process: each forms its job under its own store prefix


class GlooWorld:
    """:class:`~hvdcore.controllers.base.World` over a private Gloo group."""

    def __init__(self, rank: int, size: int, group: Any) -> None:
        self._rank, self._size, self._group = rank, size, group

    def Get_rank(self) -> int:  # noqa: N802 - the World protocol's (mpi4py's) names
        """This rank."""
        return self._rank

    def Get_size(self) -> int:  # noqa: N802
        """The number of ranks."""
        return self._size

    def allgather(self, obj: Any) -> list[Any]:
        """Every rank's ``obj``, in rank order."""
        import torch.distributed as dist

        out: list[Any] = [None] * self._size
        dist.all_gather_object(out, obj, group=self._group)
        return out

    def bcast(self, obj: Any, root: int = 0) -> Any:
        """Root's ``obj`` on every rank."""
        import torch.distributed as dist

        box = [obj]
        dist.broadcast_object_list(box, src=root, group=self._group)
        return box[0]

    def Abort(self, code: int) -> None:  # noqa: N802
        """End this process; the liveness watchdog and the launcher end the others."""
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _store(info: gloo_env.LaunchInfo, timeout: float) -> Any:
    """The job's TCPStore (hosted here or reached), or RendezvousError naming the address."""
    import torch.distributed as dist

    where = f"{info.addr}:{info.port}" if info.port else info.addr
    try:
        return dist.TCPStore(info.addr, info.port, info.size, info.store_here,
                             datetime.timedelta(seconds=timeout), wait_for_workers=False)
    except Exception as exc:  # noqa: BLE001 - every failure becomes one clear error
        first = (str(exc).strip().splitlines() or [""])[0]
        verb = "cannot listen on" if info.store_here else "cannot reach the rendezvous store at"
        raise RendezvousError(
            f"rank {info.rank}: {verb} {where} (from {info.source}; started by {info.launcher}) "
            f"within {timeout:g} s (HVDCORE_RENDEZVOUS_TIMEOUT, hvdcorerun "
            f"--gloo-timeout-seconds): {type(exc).__name__}: {first}. Check that the address "
            "is this job's, that the port is free and open between the nodes, or raise the "
            "timeout if nodes start slowly") from exc


class _Superseded(Exception):
    """An elastic generation was replaced by a newer one while its ranks checked in."""


def _wait(store: Any, keys: list[str], deadline: float, info: gloo_env.LaunchInfo) -> None:
    """Wait for ``keys`` until ``deadline`` (the check-in's own timeout error comes after)."""
    while not store.check(keys) and time.monotonic() < deadline:
        if info.superseded is not None and info.superseded():
            raise _Superseded()
        time.sleep(0.01)


def _missing(info: gloo_env.LaunchInfo, missing: list[int], timeout: float
             ) -> RendezvousError:
    """The error of a check-in that waited ``timeout`` for ranks ``missing``."""
    why = ("were they started with another controller (HVDCORE_CONTROLLER), another size, or "
           "another rendezvous address?")
    if info.prefix:  # an elastic generation: its ranks come from the last one
        why = ("a rank of the last generation may still be leaving it (stuck in a collective "
               "with a peer that is gone), or have ended without the launcher noticing")
    return RendezvousError(
        f"rank {info.rank}: ranks {missing} of {info.size} did not reach the rendezvous store "
        f"at {info.addr}:{info.port}{f' ({info.prefix})' if info.prefix else ''} within "
        f"{timeout:g} s (HVDCORE_RENDEZVOUS_TIMEOUT); {why}")


def _check_in(store: Any, info: gloo_env.LaunchInfo, timeout: float) -> None:
    """Every rank announces (size, host); a rank that disagrees fails at once, a missing one
    within ``timeout``, on every rank that waits for it."""
    host = socket.gethostname()
    me = f"{info.size} {host} {os.getpid()} {info.launcher}"
    if not 0 <= info.rank < info.size:
        raise ConfigError(f"rank {info.rank} is outside 0..{info.size - 1} ({info.launcher})")
    if store.add(f"claim/{info.rank}", 1) != 1:
        raise RendezvousError(
            f"rank {info.rank}: another process already checked in as rank {info.rank} at "
            f"{info.addr}:{info.port} ({store.get(f'rank/{info.rank}').decode()}); two jobs share "
            "this rendezvous address, or the launcher gave one rank twice")
    store.set(f"rank/{info.rank}", me)
    deadline = time.monotonic() + timeout
    if info.rank != 0:
        _wait(store, ["rank/0"], deadline, info)
        if not store.check(["rank/0"]):  # (a get would wait out the store's timeout again)
            raise _missing(info, [0], timeout)
        size0 = int(store.get("rank/0").decode().split()[0])
        if size0 != info.size:
            raise RendezvousError(
                f"rank {info.rank}: this rank was started for {info.size} ranks, rank 0 for "
                f"{size0} (at {info.addr}:{info.port}); start every rank with the same size")
    keys = [f"rank/{r}" for r in range(info.size)]
    while not store.check(keys):
        if info.superseded is not None and info.superseded():
            raise _Superseded()
        if time.monotonic() > deadline:
            raise _missing(info, [r for r in range(info.size)
                                  if not store.check([f"rank/{r}"])], timeout)
        time.sleep(0.01)
    for r in range(info.size):
        size_r = int(store.get(f"rank/{r}").decode().split()[0])
        if size_r != info.size:
            raise RendezvousError(
                f"rank {info.rank}: rank {r} was started for {size_r} ranks, this rank for "
                f"{info.size}; start every rank with the same size")


def _layout(info: gloo_env.LaunchInfo, hosts: list[Any]) -> tuple[int, int, int, int]:
    """(local rank, local size, cross rank, cross size): the launcher's when it gave all four,
    else from each rank's node (``hosts``), as MPI's shared-memory split would make them."""
    given = (info.local_rank, info.local_size, info.cross_rank, info.cross_size)
    if all(v is not None for v in given):
        return given  # type: ignore[return-value]
    me = hosts[info.rank]
    local = [r for r, h in enumerate(hosts) if h == me]
    local_rank = local.index(info.rank)
    locals_ = [[r for r, h in enumerate(hosts) if h == x].index(r) for r, x in enumerate(hosts)]
    cross = [r for r, lr in enumerate(locals_) if lr == local_rank]
    return local_rank, len(local), cross.index(info.rank), len(cross)


def _launch_info(cfg: Any, timeout: float) -> gloo_env.LaunchInfo:
    """This rank's place: the elastic launcher's newest generation, else the launch's
    variables."""
    if elastic_env.enabled(os.environ):
        return elastic_env.read(os.environ, timeout, float(cfg.elastic_timeout) + timeout)
    return gloo_env.read(os.environ)


class GlooController:
    """:class:`~hvdcore.controllers.base.Controller` over torch.distributed (no mpi4py)."""

    name = "gloo"
    hierarchical = False
    compiled_steady = False

    def available(self) -> tuple[bool, str]:
        """torch with torch.distributed's Gloo backend importable."""
        if importlib.util.find_spec("torch") is None:
            return False, "torch is not installed (pip install 'hvdcore[torch]')"
        import torch.distributed as dist

        if not dist.is_available() or not dist.is_gloo_available():
            return False, "this torch build has no torch.distributed Gloo backend"
        return True, "torch.distributed Gloo"

    def form(self, cfg: Any, comm: Any, reason: str, on_rank: Callable[[int], None]) -> Formed:
        """See :meth:`Controller.form`."""
        global _generation
        import torch
        import torch.distributed as dist

        from hvdcore.backends import registry
        from hvdcore.controllers.gloo_control import GlooComm, GlooControlPlane

        ok, why = self.available()
        if not ok:
            raise CapabilityError(f"the Gloo controller cannot run here: {why}")
        if cfg.hierarchical_allreduce or cfg.hierarchical_allgather:
            raise ConfigError(
                "HVDCORE_HIERARCHICAL_ALLREDUCE/ALLGATHER need the MPI controller (an MPI-3 "
                f"shared-memory window); this job runs on Gloo ({reason}): unset them")
        timeout = float(cfg.rendezvous_timeout)
        while True:
            info = _launch_info(cfg, timeout)
            on_rank(info.rank)
            root = _store(info, timeout)
            _generation += 1
            # a job's ranks init the same number of times: each init gets fresh keys (an
            # elastic generation's are the launcher's)
            base = info.prefix or f"hvdcore/{_generation}/"
            store = dist.PrefixStore(base, root)
            try:
                _check_in(store, info, timeout)
                break
            except _Superseded:
                log.info("generation %s was replaced while forming; joining the newer one",
                         info.source)
        if dist.is_initialized():
            raise RendezvousError(
                "torch.distributed is already initialized in this process: on the Gloo "
                "controller hvdcore forms the default group itself; call hvd.init() before "
                "(or instead of) torch.distributed.init_process_group")
        gpu = torch.cuda.is_available() and dist.is_nccl_available()
        spec = "cpu:gloo,cuda:nccl" if gpu else "gloo"
        socks = GlooSockets()
        everyone = list(range(info.size))
        with socks.track():
            dist.init_process_group(spec, store=dist.PrefixStore("pg/", store),
                                    rank=info.rank, world_size=info.size,
                                    timeout=datetime.timedelta(seconds=timeout))
            data = dist.new_group(everyone, backend="gloo")
            misc = dist.new_group(everyone, backend="gloo")
            listener = RoundMesh.listener()
        world = GlooWorld(info.rank, info.size, misc)
        elastic = elastic_env.enabled(os.environ)
        if elastic:
            socks.peers = {p for ports in world.allgather(sorted(socks.mine)) for p in ports}
        # a node is a host name and, under Slurm, a node id (as the MPI controller's layout)
        node = (socket.gethostname(), os.environ.get("SLURM_NODEID", ""))
        nodes = world.allgather(node)
        layout = _layout(info, nodes)
        prefix = base + "ctl/"

        def connect() -> Any:  # a waiter thread's own connection to the same store
            again = dist.TCPStore(info.addr, root.port, info.size, False,
                                  datetime.timedelta(seconds=timeout))
            return dist.PrefixStore(prefix, again)

        ctl = dist.PrefixStore(prefix, root)
        mesh = RoundMesh(info.rank, info.size, ctl,
                         advertised_address(info.addr, len(set(nodes)) > 1), timeout,
                         listen=listener)
        plane = GlooControlPlane(info.rank, info.size, ctl, mesh, misc, connect)

        def close() -> None:
            if dist.is_initialized():
                dist.destroy_process_group()

        return Formed(
            "gloo", reason, world, info.rank, info.size, *layout,
            GlooComm(data, tuple(everyone), info.rank, mesh), plane,
            registry.create("gloo-host"),
            close=close, elastic=elastic, cut=socks.cut,
            describe=f"Gloo (torch {torch.__version__}; store {info.addr}:{root.port} from "
                     f"{info.source}, started by {info.launcher})")
