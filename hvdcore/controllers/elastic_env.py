"""An elastic job's worker side of the launcher's store: which generation to join, as which rank.

``hvdcorerun`` in elastic mode (:mod:`hvdcore.runner.elastic_driver`) decides the membership: it
starts and watches the workers, polls the host discovery script, and each time the set of workers
changes it publishes a *generation* in its TCPStore. A worker's ``hvd.init()`` reads the newest
generation, finds its own line there (its rank, the size and its layout, or ``out`` when its host
was removed) and forms the job at that generation's store prefix; the Gloo controller does the rest
as for any launch. The keys are in :mod:`hvdcore.elastic_wire`.

The store is torch.distributed's: this module only reads what the launcher wrote, and
counts nothing of its own.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hvdcore.controllers.gloo_env import LaunchInfo
from hvdcore.elastic_wire import Assignment, Keys, decode
from hvdcore.errors import ConfigError, HvdcoreError, RendezvousError

__all__ = ["Membership", "WorkerRemoved", "enabled", "read", "current"]

_POLL_S = 0.02


class WorkerRemoved(HvdcoreError):
    """This worker's host left the job (discovery no longer lists it): the worker ends, exit 0."""


@dataclass
class Membership:
    """The generation this process formed, and the launcher's counters as they were then."""

    store: Any
    gen: int
    wid: str
    assignment: Assignment
    updates: int
    failures: int

    def hosts_updated(self) -> bool:
        """True when the launcher announced host changes after this generation formed."""
        return self.store.add(Keys.UPDATES, 0) > self.updates

    def failed_since(self) -> bool:
        """True when a worker failed after this generation formed."""
        return self.store.add(Keys.FAILURES, 0) > self.failures

    def superseded(self) -> bool:
        """True when the launcher published a newer generation."""
        return int(self.store.get(Keys.GEN).decode()) > self.gen

    def aborted(self) -> str | None:
        """The launcher's reason for ending the job, if it did."""
        if self.store.check([Keys.ABORT]):
            return self.store.get(Keys.ABORT).decode()
        return None


_current: Membership | None = None
_last_gen = 0


def enabled(env: Mapping[str, str]) -> bool:
    """True when an elastic launcher started this process."""
    return bool(env.get("HVDCORE_ELASTIC_RENDEZVOUS"))


def current() -> Membership | None:
    """The generation this process last formed (None outside an elastic job)."""
    return _current


def _connect(text: str, timeout: float) -> Any:
    import torch.distributed as dist

    addr, _, port = text.rpartition(":")
    if not addr or not port.isdigit():
        raise ConfigError(f"HVDCORE_ELASTIC_RENDEZVOUS={text!r} is not host:port")
    try:
        return dist.TCPStore(addr, int(port), None, False, datetime.timedelta(seconds=timeout))
    except Exception as exc:  # noqa: BLE001 - one clear error
        raise RendezvousError(
            f"cannot reach the elastic launcher's store at {text} within {timeout:g} s: "
            f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") from exc


def read(env: Mapping[str, str], timeout: float, wait_s: float) -> LaunchInfo:
    """Wait (up to ``wait_s``) for a generation newer than this process's last one that lists
    this worker; record it as :func:`current` and return where to form it.

    Raises :class:`WorkerRemoved` when this worker's host left, RendezvousError when the
    launcher ended the job (its reason) or no generation came in time.
    """
    global _current, _last_gen
    wid = env.get("HVDCORE_ELASTIC_WORKER", "")
    if not wid:
        raise ConfigError("HVDCORE_ELASTIC_RENDEZVOUS is set but HVDCORE_ELASTIC_WORKER is not")
    store = _current.store if _current is not None else _connect(
        env["HVDCORE_ELASTIC_RENDEZVOUS"], timeout)
    deadline = time.monotonic() + wait_s
    while True:
        if store.check([Keys.ABORT]):
            raise RendezvousError(store.get(Keys.ABORT).decode())
        gen = int(store.get(Keys.GEN).decode())
        if gen > _last_gen and store.check([Keys.worker(gen, wid)]):
            line = store.get(Keys.worker(gen, wid)).decode()
            a = decode(line)
            if a is None:
                _last_gen = gen
                raise WorkerRemoved(f"worker {wid}: its host left the job (generation {gen})")
            updates, failures = (int(x) for x in store.get(Keys.counts(gen)).decode().split())
            _last_gen = gen
            _current = Membership(store, gen, wid, a, updates, failures)
            addr, _, port = env["HVDCORE_ELASTIC_RENDEZVOUS"].rpartition(":")
            return LaunchInfo(a.rank, a.size, addr, int(port), False, "hvdcorerun (elastic)",
                              f"HVDCORE_ELASTIC_RENDEZVOUS, generation {gen}",
                              a.local_rank, a.local_size, a.cross_rank, a.cross_size,
                              prefix=Keys.prefix(gen), superseded=_current.superseded)
        if time.monotonic() > deadline:
            raise RendezvousError(
                f"worker {wid}: no generation of the elastic job listed this worker within "
                f"{wait_s:g} s (HVDCORE_ELASTIC_TIMEOUT); is hvdcorerun still running?")
        time.sleep(_POLL_S)
