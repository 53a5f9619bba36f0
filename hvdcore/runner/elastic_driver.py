"""``hvdcorerun --min-np/--max-np/--host-discovery-script``: an elastic job's launcher.

The launcher owns the membership, as Horovod's driver does: it hosts a torch.distributed
TCPStore, starts one worker per slot of the usable hosts, and watches every worker's process.
Each time the workers change it publishes a generation in the store
(:mod:`hvdcore.elastic_wire`): every live worker's rank and layout, survivors first in their
old order (rank 0 stays a survivor, so ``sync()`` always sends committed state), new workers
after them, ``out`` for the workers of a host that left. The workers' ``hvd.init()`` joins it
(:mod:`hvdcore.controllers.elastic_env`).

- A worker that fails (non-zero exit, or a signal) blacklists its host
  (:class:`~hvdcore.runner.elastic_hosts.Blacklist`); the host's other workers are stopped;
  the survivors roll back and continue at ``>= --min-np``.
- The job starts once ``-np`` (else ``--min-np``) slots are listed, with a worker on every
  slot up to ``--max-np`` (:mod:`hvdcore.runner.elastic_slots`). The discovery script is then
  polled about once a second; new hosts and new slots get workers (up to ``--max-np``) and the
  running workers are interrupted at their next commit; a host that is no longer listed, or
  the slots a host no longer lists, leave at the next commit (their workers end with status 0).
  A failure of the script's first run ends the job; later failures are reported and the job
  goes on with the hosts it has (Horovod's driver).
- Below ``--min-np`` the launcher waits up to ``--elastic-timeout`` for hosts; after
  ``--reset-limit`` resets, when every host is blacklisted for good, or when no worker of the
  last generation is left to broadcast the committed state, it ends the job: the reason goes to
  every waiting worker (which raise it) and to stderr, and hvdcorerun exits non-zero.
- The job succeeds when every worker that was not removed has exited with status 0.
- Workers' lines are tagged ``[N]<stdout>:``, N the rank the worker had in the first
  generation it was in (horovodrun's Gloo launcher: the rank a worker started as; it keeps
  the tag when its rank changes later), on the terminal and, with ``--output-filename DIR``,
  in ``DIR/rank.N/stdout`` and ``stderr``, truncated when a later worker starts as rank N.
  Lines a worker prints before its first generation are held until then
  (:mod:`hvdcore.runner.worker_output`); a worker that ends before it had a rank shows them
  tagged ``[host:slot]``. ``--prefix-output-with-timestamp`` puts the time before every tag.
"""

from __future__ import annotations

import datetime
import logging
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from hvdcore.elastic_wire import Assignment, Keys, encode
from hvdcore.runner.elastic_hosts import Blacklist, DiscoveryError
from hvdcore.runner.elastic_slots import NO_SURVIVOR, Slot, plan_slots
from hvdcore.runner.elastic_workers import (
    ProcessOptions,
    ProcessStarter,
    WorkerProcess,
    WorkerStarter,
)
from hvdcore.runner.gloo_launch import _own_names, iface_address, is_local
from hvdcore.runner.hosts import Host

__all__ = ["ElasticDriver", "ElasticSettings", "run_elastic_job"]

log = logging.getLogger("hvdcore.runner")

_TICK_S = 0.05
_DISCOVERY_PERIOD_S = 1.0
_FAILURE_NOTE_S = 30.0  # a discovery script failing every second is reported this often
_GRACE_S = 10.0  # for workers to read the launcher's reason and exit, before SIGKILL


@dataclass(frozen=True)
class ElasticSettings:
    """The elastic launch's parameters (Horovod's flags)."""

    min_np: int
    max_np: int | None
    start_np: int | None
    discover: Callable[[], list[Host]]
    elastic_timeout: float
    reset_limit: int | None
    cooldown: tuple[float, float] | None
    store_timeout: float
    iface: str | None = None  # --network-interfaces: the store's address and the workers' Gloo
    address: str | None = None  # where the workers reach the store (None: found from hosts)
    who: str = "hvdcorerun"  # what the launcher's lines start with
    terms: Mapping[str, str] | None = None  # the caller's names of the flags, in messages

    def term(self, flag: str) -> str:
        """How the caller spells ``flag`` (``--min-np``: ``min_workers`` for Ray)."""
        return (self.terms or {}).get(flag, flag)


@dataclass
class _Worker:
    wid: str
    host: str
    slot: int
    proc: WorkerProcess
    rank: int = -1  # in the last generation published (-1: none yet)
    gen: int = 0  # the last generation it was in
    state: str = "running"  # running, done, failed, stopped (its host failed), removed
    told: bool = False  # removed, and a generation published says so (it cannot come back)

    def revivable(self) -> bool:
        """Removed, but no generation said so yet: listed again, it keeps its slot."""
        return self.state == "removed" and not self.told and self.proc.poll() is None

    def assign(self, rank: int, gen: int) -> None:
        """Its rank in generation ``gen``; the first one is its tag and names its files
        (horovodrun's)."""
        if self.rank < 0:
            self.proc.named(rank)
        self.rank, self.gen = rank, gen


def _say(text: str, who: str = "hvdcorerun") -> None:
    print(f"{who}: {text}", file=sys.stderr, flush=True)


@dataclass
class _Failures:
    """A discovery script's failures in a row, reported as warnings: the first, then one at
    most every _FAILURE_NOTE_S (it runs every second), and its recovery."""

    count: int = 0
    noted: float = 0.0
    who: str = "hvdcorerun"

    def failed(self, exc: DiscoveryError) -> None:
        """Count a failure; report it when it is the first or the last report is old."""
        self.count += 1
        now = time.monotonic()
        if self.count == 1 or now - self.noted >= _FAILURE_NOTE_S:
            self.noted = now
            _say(f"warning: {exc} ({self.count} failure(s) in a row); the job goes on with "
                 "the hosts it has", self.who)

    def worked(self) -> None:
        """The script ran: report the recovery after failures."""
        if self.count:
            _say(f"host discovery works again after {self.count} failure(s)", self.who)
            self.count = 0


def _no_survivor(workers: Sequence[_Worker], gen: int) -> str:
    """Why the job ends when no worker of generation ``gen`` is left with its state."""
    if not any(w.state == "removed" for w in workers if w.gen == gen):
        return f"every worker of generation {gen} failed: none is left to broadcast the state"
    return (f"{NO_SURVIVOR} (no worker of generation {gen} is left: new workers would start "
            "from the initial state, not from the last commit)")


class ElasticDriver:
    """One elastic job (see the module docstring): :meth:`run` it once; ``workers`` are
    every worker it started, each with its ``state`` and its last ``rank``.
    ``starter`` starts them, each with ``environ``, ``exports`` and the job's variables."""

    def __init__(self, settings: ElasticSettings, starter: WorkerStarter,
                 environ: Mapping[str, str], exports: Mapping[str, str]) -> None:
        import torch.distributed as dist  # the store the workers meet at

        self.s = settings
        self.starter = starter
        self.environ, self.exports = environ, exports
        self.own = _own_names()
        # the script's first run: its hosts place the store, its failure ends the job (run())
        self.first: list[Host] | DiscoveryError
        try:
            self.first = settings.discover()
        except DiscoveryError as exc:
            self.first = exc
        local = self._all_local_hint() and not settings.iface and not settings.address
        self.store = dist.TCPStore("127.0.0.1" if local else "0.0.0.0", 0,
                                   None, True,
                                   datetime.timedelta(seconds=settings.store_timeout),
                                   wait_for_workers=False)
        self.addr = (settings.address or (iface_address(settings.iface) if settings.iface
                     else "127.0.0.1" if local else _my_address()))
        self.store.add(Keys.UPDATES, 0)
        self.store.add(Keys.FAILURES, 0)
        self.blacklist = Blacklist(settings.cooldown)
        self.workers: list[_Worker] = []
        self.exits: queue.Queue[tuple[_Worker, int]] = queue.Queue()
        self.lock = threading.Lock()
        self.gen = 0
        self.resets = 0
        self.incarnation: dict[tuple[str, int], int] = {}
        self.hosts: list[Host] = []
        self.discovery_failures = _Failures(who=settings.who)
        self.short_since: float | None = None  # when the job fell below --min-np
        self.finished_at: float | None = None  # when the first worker succeeded
        self.failed_after_finish = False
        self.reason: str | None = None  # why the job failed, once it has

    def _say(self, text: str) -> None:
        _say(text, self.s.who)

    def _all_local_hint(self) -> bool:
        if isinstance(self.first, DiscoveryError):
            return True
        return all(is_local(h.name, self.own) for h in self.first)

    # -- workers -----------------------------------------------------------------------------

    def _live(self) -> list[_Worker]:
        return [w for w in self.workers if w.state == "running"]

    def _spawn(self, host: str, slot: int) -> None:
        n = self.incarnation.get((host, slot), 0)
        self.incarnation[(host, slot)] = n + 1
        wid = f"{host}:{slot}" + (f".{n}" if n else "")
        env = {**self.environ, **self.exports,
               "HVDCORE_ELASTIC_RENDEZVOUS": f"{self.addr}:{self.store.port}",
               "HVDCORE_ELASTIC_WORKER": wid, "HOROVOD_HOSTNAME": host,
               "HVDCORE_CONTROLLER": "gloo", "HOROVOD_CONTROLLER": "gloo"}
        if self.s.iface:
            env.setdefault("GLOO_SOCKET_IFNAME", self.s.iface)
        proc = self.starter.start(host, slot, wid, env)
        worker = _Worker(wid, host, slot, proc)
        self.workers.append(worker)
        threading.Thread(target=lambda: self.exits.put((worker, proc.wait())),
                         daemon=True).start()

    def _stop(self, workers: Sequence[_Worker], sig: int) -> None:
        for w in workers:
            w.proc.stop(sig)

    # -- hosts -------------------------------------------------------------------------------

    def _poll(self, first: bool = False) -> bool:
        """Run the discovery script; False when it failed (the job keeps its last hosts).
        The first run's failure is raised: a script that never worked ends the job."""
        try:
            if first and isinstance(self.first, DiscoveryError):
                raise self.first
            found = self.first if first and isinstance(self.first, list) else self.s.discover()
        except DiscoveryError as exc:
            if first:
                raise
            self.discovery_failures.failed(exc)
            return False
        self.discovery_failures.worked()
        self.hosts = found
        return True

    def _discover(self) -> bool:
        """Poll the hosts; True when the job's workers changed (added or removed)."""
        return self._poll() and self._apply()

    def _apply(self) -> bool:
        """Start and stop workers so that they fill the hosts' usable slots up to --max-np;
        True when the workers changed."""
        have = [w for w in self.workers if w.state == "running" or w.revivable()]
        plan = plan_slots(self.hosts, [Slot(w.host, w.slot, w.rank) for w in have],
                          self.s.max_np, self.blacklist.blocked)
        changed = False
        for w in have:  # a slot listed again before its worker was told to leave keeps it
            if w.state == "removed" and (w.host, w.slot) not in plan.stop:
                w.state = "running"
                changed = True
        gone = [w for w in have if w.state == "running" and (w.host, w.slot) in plan.stop]
        for w in gone:
            w.state = "removed"
        listed = {h.name for h in self.hosts}
        left = sorted({w.host for w in gone if w.host not in listed and w.rank >= 0})
        if left:
            self._say("hosts left the job: " + ", ".join(left))
        for host in dict.fromkeys(w.host for w in gone if w.host in listed):
            self._say(f"host {host} lists fewer slots: worker(s) " + ", ".join(
                w.wid for w in gone if w.host == host) + " leave the job")
        changed |= bool(gone)
        if not plan.start:
            return changed
        limit = self.s.reset_limit
        if self.gen > 0 and limit is not None and self.resets >= limit:
            # the reset these workers need is over --reset-limit: run() ends the job, so no
            # worker is started only to be killed after the abort's grace period
            return True
        used = {w.host for w in self._live()}
        for host in dict.fromkeys(h for h, _ in plan.start):
            slots = [slot for h, slot in plan.start if h == host]
            if self.gen > 0:
                self._say(f"host {host} joins the job with {len(slots)} slot(s)" if host not in used
                     else f"host {host}: {len(slots)} more slot(s) used")
            for slot in slots:
                self._spawn(host, slot)
        return True

    def _usable_slots(self) -> int:
        return sum(h.slots for h in self.hosts if not self.blacklist.blocked(h.name))

    # -- generations ---------------------------------------------------------------------------

    def _publish(self) -> None:
        live = self._live()
        # survivors in their old order first (rank 0 stays one), new workers after; each
        # host's workers together (Horovod's layout)
        live.sort(key=lambda w: (w.rank < 0, w.rank, w.slot))
        hosts = list(dict.fromkeys(w.host for w in live))
        ordered = [w for h in hosts for w in live if w.host == h]
        ordered.sort(key=lambda w: (hosts.index(w.host), w.slot))
        per_host = {h: [w for w in ordered if w.host == h] for h in hosts}
        self.gen += 1
        for rank, w in enumerate(ordered):
            local = per_host[w.host].index(w)
            cross = [h for h in hosts if len(per_host[h]) > local]
            a = Assignment(rank, len(ordered), local, len(per_host[w.host]),
                           cross.index(w.host), len(cross), w.host, w.rank < 0)
            self.store.set(Keys.worker(self.gen, w.wid), encode(a))
            w.assign(rank, self.gen)
        for w in self.workers:
            if w.state == "removed":
                self.store.set(Keys.worker(self.gen, w.wid), encode(None))
                w.told = True
        self.store.set(Keys.counts(self.gen), f"{self.store.add(Keys.UPDATES, 0)} "
                                               f"{self.store.add(Keys.FAILURES, 0)}")
        self.store.set(Keys.GEN, str(self.gen))
        log.info("generation %d: %d workers", self.gen, len(ordered))
        if self.gen > 1:
            self._say(f"generation {self.gen}: {len(ordered)} worker(s) on "
                 f"{', '.join(f'{h}:{len(per_host[h])}' for h in hosts)} (reset {self.resets})")

    # -- events --------------------------------------------------------------------------------

    def _on_exit(self, w: _Worker, code: int) -> bool:
        """A worker's process ended; True when the job's membership changed."""
        if w.state in ("removed", "stopped"):
            w.state = "removed" if w.state == "removed" else "stopped"
            return False
        if code == 0:
            w.state = "done"
            if self.finished_at is None:
                self.finished_at = time.monotonic()
            return False
        w.state = "failed"
        if self.finished_at is not None:
            self.failed_after_finish = True
        how = f"was killed by signal {-code}" if code < 0 else f"exited with status {code}"
        self.store.add(Keys.FAILURES, 1)
        wait = self.blacklist.add(w.host)
        others = [o for o in self._live() if o.host == w.host]
        for o in others:
            o.state = "stopped"
        self._stop(others, signal.SIGKILL)
        until = "for good" if wait == float("inf") else f"for {wait:.0f} s"
        self._say(f"worker {w.wid} (rank {w.rank}) {how}; host {w.host} is blacklisted {until}"
             + (f", its {len(others)} other worker(s) stopped" if others else ""))
        return True

    def _survivors(self, revivable: bool = False) -> list[_Worker]:
        """The running workers of the last generation, which hold its committed state
        (``revivable``: with those removed but not told yet, which a listing may bring back)."""
        return [w for w in self.workers if w.rank >= 0 and (
            w.state == "running" or (revivable and w.revivable()))]

    def _abort(self, reason: str) -> int:
        self.reason = reason
        self.store.set(Keys.ABORT, reason)
        self._say(f"job failed: {reason}")
        deadline = time.monotonic() + _GRACE_S
        while any(w.proc.poll() is None for w in self.workers) and time.monotonic() < deadline:
            time.sleep(_TICK_S)
        self._stop(self.workers, signal.SIGKILL)
        return 1

    def run(self) -> int:
        start = time.monotonic()
        need, flag = ((self.s.start_np, self.s.term("-np")) if self.s.start_np is not None
                      else (self.s.min_np, self.s.term("--min-np")))
        first = True
        while True:  # the first generation: once -np (else --min-np) slots are listed
            try:
                polled = self._poll(first)
            except DiscoveryError as exc:
                return self._abort(str(exc))
            first = False
            if polled and self._usable_slots() >= need:
                self._apply()
                if len(self._live()) >= self.s.min_np:
                    break
            if time.monotonic() - start > self.s.elastic_timeout:
                return self._abort(
                    f"{self._usable_slots()} slot(s) available, fewer than {flag} "
                    f"{need}, for {self.s.term('--elastic-timeout')} "
                    f"{self.s.elastic_timeout:g} s")
            time.sleep(_DISCOVERY_PERIOD_S)
        self._publish()
        next_poll = time.monotonic() + _DISCOVERY_PERIOD_S
        pending = False
        while True:
            try:
                w, code = self.exits.get(timeout=_TICK_S)
                pending |= self._on_exit(w, code)
                continue  # take every exit that is queued before deciding
            except queue.Empty:
                pass
            if self.finished_at is not None:
                # the training function returned: no more changes, wait for the rest
                if not self._live():
                    if self.failed_after_finish:
                        self.reason = "a worker failed after others had finished"
                        self._say(f"job failed: {self.reason}")
                        return 1
                    return 0
                continue
            if not self._live() and not pending:
                return self._abort("every worker has ended and none succeeded")
            now = time.monotonic()
            if now >= next_poll:
                next_poll = now + _DISCOVERY_PERIOD_S
                if self._discover():
                    self.store.add(Keys.UPDATES, 1)
                    pending = True
            if not pending:
                continue
            live = len(self._live())
            if live < self.s.min_np:
                if self.hosts and all(self.blacklist.for_good(h.name) for h in self.hosts):
                    return self._abort(
                        f"every host is blacklisted ({', '.join(h.name for h in self.hosts)}):"
                        f" {live} worker(s) left, fewer than {self.s.term('--min-np')} "
                        f"{self.s.min_np}; give {self.s.term('--blacklist-cooldown-range')} "
                        "to let failed hosts back")
                if not self._survivors(revivable=True):
                    return self._abort(_no_survivor(self.workers, self.gen))
                if self.short_since is None:
                    self.short_since = now
                    self._say(f"{live} worker(s) left, fewer than {self.s.term('--min-np')} "
                              f"{self.s.min_np}; waiting up to {self.s.elastic_timeout:g} s "
                              f"({self.s.term('--elastic-timeout')}) for hosts")
                if now - self.short_since > self.s.elastic_timeout:
                    return self._abort(
                        f"only {live} worker(s), fewer than {self.s.term('--min-np')} "
                        f"{self.s.min_np}, after {self.s.term('--elastic-timeout')} "
                        f"{self.s.elastic_timeout:g} s")
                continue
            self.short_since = None
            if not self._survivors():
                return self._abort(_no_survivor(self.workers, self.gen))
            self.resets += 1
            if self.s.reset_limit is not None and self.resets > self.s.reset_limit:
                return self._abort(f"the job was reset {self.resets - 1} time(s), the "
                                   f"{self.s.term('--reset-limit')} {self.s.reset_limit}; "
                                   "not resetting again")
            self._publish()
            pending = False


def _my_address() -> str:
    import socket

    return socket.gethostbyname(socket.gethostname())


def run_elastic_job(settings: ElasticSettings, options: ProcessOptions,
                    command: Sequence[str], environ: Mapping[str, str],
                    exports: Mapping[str, str]) -> int:
    """Run ``command`` as an elastic job (see the module docstring); the exit code."""
    driver = ElasticDriver(settings, ProcessStarter(options, command, _own_names()),
                           environ, exports)
    received: list[int] = []

    def forward(signum: int, frame: object) -> None:
        received.append(signum)
        driver._stop(driver.workers, signal.SIGKILL if len(received) >= 3 else signum)

    main = threading.current_thread() is threading.main_thread()
    previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)} \
        if main else {}
    try:
        if received:
            return 130
        return driver.run()
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
        driver._stop(driver.workers, signal.SIGKILL)
