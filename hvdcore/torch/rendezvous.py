"""torch.distributed's process group for hvdcore's world, formed over MPI so it cannot hang.

:func:`init_process_group` is a collective over hvdcore's ranks (call it after
``hvdcore.init()``; ``hvdcore.torch.init()`` does). It gives ``torch.distributed`` a default group
with rank ``hvdcore.rank()`` and world size ``hvdcore.size()``:

1. Every rank sends its host identity (hostname, plus ``SLURM_NODEID`` under Slurm) and its IPv4
   interfaces over MPI (``allgather_object``).
2. Rank 0 picks the address (:func:`hvdcore.netaddr.choose_address`): ``MASTER_ADDR`` if set;
   else the interface ``HVDCORE_GLOO_IFACE`` (alias ``HOROVOD_GLOO_IFACE``), ``GLOO_SOCKET_IFNAME``
   or ``NCCL_SOCKET_IFNAME`` names; else loopback when all ranks share one host; else a
   non-loopback address on a subnet every other host also has. It listens on ``MASTER_PORT``
   (default: a free port, bound once, so no race), checks that it reaches itself there, starts a
   ``TCPStore`` on that socket and sends the port over MPI.
3. Every other rank connects. Each rank's Gloo is pointed at the chosen network: its interface
   on the chosen subnet with ranks on several hosts, loopback on one host (``GLOO_SOCKET_IFNAME``
   is set for this process unless the user set it, and removed again by :func:`destroy`);
   otherwise Gloo advertises the hostname's address, often 127.0.1.1 on cluster nodes.
4. ``torch.distributed.init_process_group(backend, store=...)``. Collectives then get torch's
   default timeouts back (30 min; NCCL 10 min): only forming the group is bounded. NCCL connects
   lazily at its first collective, under its own timeout and ``NCCL_SOCKET_IFNAME``.

Each step (reaching rank 0's store; forming the group; each :func:`new_group`) is bounded by
``HVDCORE_RENDEZVOUS_TIMEOUT`` seconds (default 120) and its outcome is exchanged over MPI, which
works whatever TCP does, so a failure is a :class:`~hvdcore.errors.RendezvousError` on *every*
rank, within about that time per step, naming the failing ranks, the address, port and
interface, why they were chosen, and what to do::

    RendezvousError: torch.distributed rendezvous (gloo) failed while connecting to rank 0's
    store: rank 2 on node7: cannot connect to 10.1.0.10:36749: OSError: [Errno 101] Network is
    unreachable. Address 10.1.0.10:36749 (rank 0's interface ib0), chosen because ranks on 2
    hosts; no subnet of rank 0 is shared by every rank: ranks [2] have no address on
    10.1.0.0/16. Timeout 120 s (HVDCORE_RENDEZVOUS_TIMEOUT). What to do: set MASTER_ADDR ...

A torch.distributed group the user created before, with rank ``hvd.rank()`` and size
``hvd.size()`` on every rank, is adopted instead (and never destroyed by hvdcore).

:func:`check_distinct_devices` (from :mod:`hvdcore.torch.device_check`) is the collective check that
no two ranks drive one GPU (NCCL refuses that); :func:`describe` is the one-line summary for logs
and ``--check-build``.

Example::

    >>> import hvdcore as hvd
    >>> from hvdcore.torch import rendezvous
    >>> hvd.init()
    >>> rendezvous.init_process_group("gloo")
    >>> print(rendezvous.describe())
    torch.distributed rendezvous tcp://192.0.2.2:36093 (gloo, 4 ranks): interface eth0, ranks
    on 2 hosts; subnet 192.0.2.0/24 is shared by every rank; Gloo interface eth0
    (GLOO_SOCKET_IFNAME set by hvdcore)
"""

from __future__ import annotations

import datetime
import os
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import hvdcore as _core
from hvdcore import basics as _basics
from hvdcore.errors import RendezvousError
from hvdcore.netaddr import (
    Choice,
    HostReport,
    choose_address,
    iface_rule,
    local_host,
    local_interfaces,
)
from hvdcore.torch.device_check import (
    DeviceReport,
    check_distinct_devices,
    duplicate_devices,
    shared_devices_message,
)

__all__ = ["init_process_group", "new_group", "destroy", "check_distinct_devices",
           "shared_devices_message", "duplicate_devices", "DeviceReport", "describe", "is_owned"]

_MIN_STEP_S = 2.0
_HINT = ("set MASTER_ADDR to an address of rank 0's node that every node reaches (or unset it), "
         "or HVDCORE_GLOO_IFACE to the interface of the network between the nodes (e.g. ib0, "
         "eth0); check that firewalls allow TCP between the nodes (the port above and Gloo's "
         "ports); raise HVDCORE_RENDEZVOUS_TIMEOUT if nodes start slowly")


@dataclass
class _State:
    choice: Choice
    port: int
    backend: str
    owned: bool
    store: Any = None
    gloo_set: str | None = None  # GLOO_SOCKET_IFNAME we set (removed again by destroy)


_STATE: _State | None = None


def _timeout(timeout_s: float | None) -> float:
    if timeout_s is not None:
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        return float(timeout_s)
    return float(_basics.state().cfg.rendezvous_timeout)


def _left(deadline: float) -> float:
    return max(deadline - time.monotonic(), _MIN_STEP_S)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


def _report() -> tuple[HostReport, Any]:
    cfg = _basics.state().cfg
    host, machine = local_host()
    existing = None
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        existing = (str(dist.get_backend()), dist.get_rank(), dist.get_world_size())
    report = HostReport(_core.rank(), host, machine, tuple(local_interfaces()),
                        gloo_request=cfg.gloo_iface or None,
                        gloo_env=os.environ.get("GLOO_SOCKET_IFNAME") or None)
    return report, existing


def _probe(address: str, port: int, deadline: float) -> None:
    """Open (and close) one TCP connection to the store, retrying until ``deadline``.

    torch's own client retries with back-off and overruns its timeout by up to ~2.5x.
    """
    while True:
        try:
            with socket.create_connection((address, port), timeout=_left(deadline)):
                return
        except ConnectionRefusedError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.1)


def _bind() -> socket.socket:
    """Rank 0's listening socket on MASTER_PORT, else on a free port (bound once: no race)."""
    raw = os.environ.get("MASTER_PORT", "")
    try:
        port = int(raw) if raw else 0
    except ValueError as exc:
        raise RendezvousError(f"MASTER_PORT={raw!r} is not a port number") from exc
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind(("", port))
        srv.listen(1024)
    except OSError as exc:
        srv.close()
        raise RendezvousError(f"cannot listen on port {port} (MASTER_PORT): "
                              f"{_first_line(exc)}; pick a free port or unset it") from exc
    return srv


def _reach_self(srv: socket.socket, address: str, deadline: float) -> None:
    """Check that rank 0 reaches its own listening socket at ``address``."""
    port = srv.getsockname()[1]
    try:
        _probe(address, port, deadline)
        srv.settimeout(_left(deadline))
        srv.accept()[0].close()  # the probe's connection, so the store never sees it
        srv.settimeout(None)
    except OSError as exc:
        raise RendezvousError(f"cannot reach its own store at {address}:{port}: "
                              f"{_first_line(exc)}") from exc


def _failed(backend: str, step: str, outcomes: Sequence[str | None], hosts: Sequence[str],
            choice: Choice | None, port: int | None, timeout: float) -> RendezvousError:
    """The error every rank raises: who failed and why, where, and what to do."""
    bad = [r for r, o in enumerate(outcomes) if o]
    where = ""
    if choice is not None:
        iface = f" (rank 0's interface {choice.interface})" if choice.interface else ""
        where = (f" Address {choice.address}{f':{port}' if port else ''}{iface}, chosen because "
                 f"{choice.reason}.")
    return RendezvousError(
        f"torch.distributed rendezvous ({backend}) failed while {step}: "
        + "; ".join(f"rank {r} on {hosts[r]}: {outcomes[r]}" for r in bad) + "." + where
        + f" Timeout {timeout:g} s (HVDCORE_RENDEZVOUS_TIMEOUT). What to do: {_HINT}.")


@dataclass(frozen=True)
class _Plan:
    """What rank 0 sends after choosing: the address and port, or why it could not."""

    choice: Choice | None
    port: int | None
    error: str | None = None


def _master(reports: Sequence[HostReport], deadline: float,
            timeout: float) -> tuple[_Plan, Any]:
    """Rank 0: choose the address, listen, start the store: ``(plan, store)``."""
    import torch.distributed as dist

    cfg = _basics.state().cfg
    choice, port, listener = None, None, None
    try:
        rule = iface_rule(cfg.gloo_iface, cfg.source("gloo_iface"))
        choice = choose_address(reports, os.environ.get("MASTER_ADDR") or None, rule)
        listener = _bind()
        port = listener.getsockname()[1]
        _reach_self(listener, choice.address, deadline)
        # The store closes the descriptor it is given: give it a duplicate of ours. Its timeout
        # also bounds its later waits (new groups): the full value.
        store = dist.TCPStore(choice.address, port, len(reports), True,
                              datetime.timedelta(seconds=timeout), wait_for_workers=False,
                              master_listen_fd=os.dup(listener.fileno()))
        return _Plan(choice, port), store
    except Exception as exc:  # noqa: BLE001 - every failure must reach the other ranks
        why = str(exc) if isinstance(exc, RendezvousError) else _first_line(exc)
        return _Plan(choice, port, why), None
    finally:
        if listener is not None:
            listener.close()


def _set_gloo_iface(name: str | None) -> str | None:
    if name and not os.environ.get("GLOO_SOCKET_IFNAME"):
        os.environ["GLOO_SOCKET_IFNAME"] = name
        return name
    return None


def _default_collective_timeout(group: Any, backend: str) -> None:
    """The rendezvous timeout bounds forming the group; collectives get torch's defaults."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    setter = getattr(c10d, "_set_pg_timeout", None)
    if setter is None or group is dist.GroupMember.NON_GROUP_MEMBER:
        return
    nccl = getattr(c10d, "default_pg_nccl_timeout", None)
    only_nccl = "nccl" in backend and "gloo" not in backend
    setter(nccl if only_nccl and nccl is not None else c10d.default_pg_timeout, group)


def init_process_group(backend: str, timeout_s: float | None = None) -> None:
    """Collective over hvdcore's world (after ``hvdcore.init()``): create torch.distributed's
    default process group with ``backend`` (``"gloo"``, ``"nccl"``, ``"cpu:gloo,cuda:nccl"``),
    rank ``hvdcore.rank()``, world size ``hvdcore.size()``.

    ``timeout_s`` (default ``HVDCORE_RENDEZVOUS_TIMEOUT``) bounds the rendezvous. A group the user
    already created with the same rank and size is adopted (and left alone by :func:`destroy`).
    Raises RendezvousError on every rank when any rank fails.

    >>> rendezvous.init_process_group("gloo")          # doctest: +SKIP
    """
    global _STATE
    import torch.distributed as dist

    if _STATE is not None:
        raise RendezvousError(f"init_process_group was already called ({describe()}); call "
                              "destroy() first")
    timeout = _timeout(timeout_s)
    me, n = _core.rank(), _core.size()
    gathered = _core.allgather_object(_report())
    reports = [g[0] for g in gathered]
    existing = [g[1] for g in gathered]
    deadline = time.monotonic() + timeout
    if any(existing):
        if all(e is not None and e[1:] == (r, n) for r, e in enumerate(existing)):
            _STATE = _State(Choice("", None, f"adopted the user's group ({existing[0][0]})",
                                   len({r.key for r in reports}), ()), 0, existing[0][0], False)
            return
        raise RendezvousError(
            "torch.distributed is already initialised on some ranks with another rank or world "
            f"size (backend, rank, size per rank: {existing}); hvdcore needs rank = hvd.rank() "
            f"and size = {n} on every rank: initialise it that way on all ranks, or not at all")

    hosts = [r.host for r in reports]
    plan, store = _master(reports, deadline, timeout) if me == 0 else (None, None)
    plan = _core.broadcast_object(plan, root_rank=0)
    if plan.error is not None or plan.choice is None or plan.port is None:
        raise _failed(backend, "choosing and opening the address",
                      [plan.error] + [None] * (n - 1), hosts, plan.choice, plan.port, timeout)
    choice, port = plan.choice, plan.port
    gloo_set = _set_gloo_iface(choice.gloo_ifaces[me])
    state = _State(choice, port, backend, True, store, gloo_set)

    error = None
    if me != 0:
        try:
            _probe(choice.address, port, deadline)
            state.store = dist.TCPStore(choice.address, port, n, False,
                                        datetime.timedelta(seconds=timeout))
        except Exception as exc:  # noqa: BLE001 - every failure must reach the other ranks
            error = f"cannot connect to {choice.address}:{port}: {_first_line(exc)}"
    outcomes = _core.allgather_object(error)
    if any(outcomes):
        _release(state)
        raise _failed(backend, "connecting to rank 0's store", outcomes, hosts, choice, port,
                      timeout)

    error = None
    try:
        dist.init_process_group(backend, store=state.store, rank=me, world_size=n,
                                timeout=datetime.timedelta(seconds=timeout))
        _default_collective_timeout(None, backend)
    except Exception as exc:  # noqa: BLE001 - every failure must reach the other ranks
        error = _first_line(exc)
    outcomes = _core.allgather_object(error)
    if any(outcomes):
        if error is None:
            dist.destroy_process_group()
        _release(state)
        raise _failed(backend, f"creating the {backend} process group", outcomes, hosts,
                      choice, port, timeout)
    _STATE = state


def _release(state: _State) -> None:
    state.store = None
    if state.gloo_set is not None and os.environ.get("GLOO_SOCKET_IFNAME") == state.gloo_set:
        del os.environ["GLOO_SOCKET_IFNAME"]
    state.gloo_set = None


def new_group(ranks: list[int], backend: str) -> Any:
    """Collective over hvdcore's world: ``torch.distributed.new_group(ranks, backend=backend)``
    with the rendezvous timeout bounding its creation; RendezvousError on every rank if any
    rank fails. Non-members get torch's ``GroupMember.NON_GROUP_MEMBER``.

    >>> pair = rendezvous.new_group([0, 1], "gloo")     # doctest: +SKIP
    """
    import torch.distributed as dist

    if _STATE is None or not dist.is_initialized():
        raise RendezvousError("new_group needs the default group: call init_process_group first")
    timeout = _timeout(None)
    group, error = None, None
    try:
        group = dist.new_group(ranks=sorted(ranks), backend=backend,
                               timeout=datetime.timedelta(seconds=timeout))
        _default_collective_timeout(group, backend)
    except Exception as exc:  # noqa: BLE001 - every failure must reach the other ranks
        error = _first_line(exc)
    gathered = _core.allgather_object((local_host()[0], error))
    hosts, outcomes = [g[0] for g in gathered], [g[1] for g in gathered]
    if any(outcomes):
        if error is None and group is not None and group is not dist.GroupMember.NON_GROUP_MEMBER:
            dist.destroy_process_group(group)
        raise _failed(backend, f"creating a group of ranks {sorted(ranks)}", outcomes, hosts,
                      _STATE.choice if _STATE.owned else None, _STATE.port, timeout)
    return group


def destroy() -> None:
    """Destroy the process group :func:`init_process_group` created (with the groups made from
    it), close its store and undo the ``GLOO_SOCKET_IFNAME`` it set. An adopted user group is
    left alone. Safe to call twice."""
    global _STATE
    state, _STATE = _STATE, None
    if state is None:
        return
    if state.owned:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
        _release(state)


def is_owned() -> bool:
    """True while a process group created by :func:`init_process_group` exists."""
    return _STATE is not None and _STATE.owned


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'s' if n != 1 else ''}"


def describe() -> str:
    """One line: address, port, interface and why (for logs and ``--check-build``)."""
    s = _STATE
    if s is None:
        return "torch.distributed rendezvous: not done"
    c = s.choice
    if not s.owned:
        return f"torch.distributed rendezvous: {c.reason}"
    glooed = sorted({g for g in c.gloo_ifaces if g})
    gloo = ("Gloo interface " + "/".join(glooed) if glooed else "Gloo interface: torch's choice"
            ) + (" (GLOO_SOCKET_IFNAME set by hvdcore)" if s.gloo_set else "")
    return (f"torch.distributed rendezvous tcp://{c.address}:{s.port} ({s.backend}, "
            f"{_count(len(c.gloo_ifaces), 'rank')}): "
            f"interface {c.interface or '(none of rank 0s)'}, {c.reason}; {gloo}")
