"""Process-wide state: init/shutdown, rank queries, the timeline, the abort-on-exception hook."""

from __future__ import annotations

import atexit
import logging
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from hvdcore import config as _config
from hvdcore import errors, liveness
from hvdcore.docstrings import INIT_ERRORS, INIT_RAISES, documented
from hvdcore.engine import requests
from hvdcore.engine.executor import SetState
from hvdcore.engine.messages import SHUTDOWN
from hvdcore.engine.timeline import Timeline
from hvdcore.process_sets import ProcessSet, global_process_set

log = logging.getLogger("hvdcore")

_LEVELS = {"trace": 5, "debug": logging.DEBUG, "info": logging.INFO,
           "warning": logging.WARNING, "error": logging.ERROR, "fatal": logging.CRITICAL}


@dataclass
class ProcessState:
    """What ``init()`` set up on this rank; read it with :func:`state` or :func:`current`."""

    cfg: Any
    world: Any
    rank: int
    size: int
    local_rank: int
    local_size: int
    cross_rank: int
    cross_size: int
    engine: Any  # hvdcore.engine.loop.Engine
    sets: dict[int, ProcessSet] = field(default_factory=dict)
    counters: dict[tuple[str, int], int] = field(default_factory=dict)
    comms: list[Any] = field(default_factory=list)
    watchdog: Any = None
    host_plane: Any = None  # the host data plane (closed at shutdown if it has close())
    formed: Any = None  # the controller's hvdcore.controllers.Formed
    # id(names tuple) -> that batch's arguments and metas (see hvdcore.ops.allreduce_batch_async)
    batches: dict[int, tuple] = field(default_factory=dict)
    # grouped allreduce name -> its last checked call's arguments and metas (see
    # hvdcore.ops.grouped_allreduce_async: a training step's named group skips the checks)
    groups: dict[str, tuple] = field(default_factory=dict)
    homogeneous: bool = True  # every node runs the same number of ranks (see is_homogeneous)

    def request_name(self, kind: str, set_id: int, name: str | None) -> str:
        """``name`` (checked to be a str), or the next automatic name of ``kind`` in the set:
        ranks that call the same collectives in the same order get the same names."""
        _thread.named += 1
        if name is not None:
            if not isinstance(name, str):
                raise errors.UnsupportedError(
                    f"rank {self.rank}: name must be a str or None, got {type(name).__name__}")
            return name
        key = (kind, set_id)
        n = self.counters.get(key, 0) + 1
        self.counters[key] = n
        return f"{kind}#{n}"  # "#": automatic (Horovod-style names use ".noname.")


_state: ProcessState | None = None
checked_allreduces: dict[str, tuple] = {}
"""Allreduce name -> the arguments of its last checked call, their meta and the engine (see
:func:`hvdcore.ops._allreduce_meta`: a loop's repeated calls skip the checks, and reach the
engine without a call here). Emptied by ``shutdown()``: an entry is always the live engine's."""


class _ThreadNames(threading.local):
    named = 0  # request names this thread took (see names_taken)


_thread = _ThreadNames()
thread_names = _thread
"""The calling thread's request-name count as ``thread_names.named`` (see names_taken)."""


def names_taken() -> int:
    """How many request names the calling thread has taken so far (for
    :func:`hvdcore.collectives.rejecting`: did a failed call reach the core?)."""
    return _thread.named
_lock = threading.Lock()
_hooks_installed = False
_aborting = False


def _require() -> ProcessState:
    if _state is None:
        raise errors.NotInitializedError(
            "hvdcore is not initialized: call hvd.init() first (and not after hvd.shutdown())")
    return _state


def state() -> ProcessState:
    """This rank's process state (raises NotInitializedError before init and after shutdown)."""
    st = _state
    if st is None:
        return _require()
    return st


def current() -> ProcessState | None:
    """This rank's process state, or None when hvdcore is not initialized."""
    return _state


def _setup_logging(level: str, rank: int) -> None:
    logging.addLevelName(5, "TRACE")
    log.setLevel(_LEVELS[level])
    for h in list(log.handlers):
        if getattr(h, "_hvdcore", False):
            log.removeHandler(h)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"[hvdcore rank {rank}] %(levelname)s %(message)s"))
    handler._hvdcore = True  # type: ignore[attr-defined]
    log.addHandler(handler)
    log.propagate = False


@documented(raises=INIT_ERRORS)
def init(comm: Any = None, process_sets: Sequence[ProcessSet] | str | None = None) -> None:
    """Initialize hvdcore on every rank (a no-op when already initialized).

    ``process_sets``: the sets to register now, or ``"dynamic"`` (Horovod's spelling for
    "sets are added later with ``add_process_set``", which hvdcore always allows).

    Example::

        >>> import hvdcore as hvd
        >>> hvd.init()
        >>> print(hvd.rank(), hvd.size())
    """
    global _state
    with _lock:
        if _state is not None:
            return
        if isinstance(process_sets, str):
            if process_sets != "dynamic":
                raise errors.ArgumentError(f"init(process_sets=...) takes a list of process "
                                           f"sets or 'dynamic', got {process_sets!r}")
            process_sets = None
        cfg = _config.load()
        from hvdcore import controllers
        from hvdcore.backends.degraded import wrap_from_env
        from hvdcore.engine.loop import Engine

        name, why = controllers.choose(cfg.controller, cfg.source("controller"), os.environ,
                                       comm)
        controller = controllers.get(name)
        if comm is not None and name != "mpi":
            raise errors.UnsupportedError(
                f"init(comm=...) needs the MPI controller, but this process takes {name} "
                f"({why}); drop comm=, or launch with mpirun / set HVDCORE_CONTROLLER=mpi")
        formed = controller.form(cfg, comm, why,
                                 lambda r: _setup_logging(cfg.log_level, r))
        rank, size = formed.rank, formed.size
        # one small collective here, so that is_homogeneous() is a local query later
        homogeneous = len(set(formed.world.allgather(formed.local_size))) == 1
        plane = formed.plane
        sets = {0: SetState(0, tuple(range(size)), formed.set0)}
        global_process_set.ranks = list(range(size))
        global_process_set.bind(0, rank)
        registry: dict[int, ProcessSet] = {0: global_process_set}
        for ps in process_sets or ():
            if not isinstance(ps, ProcessSet):
                ps = ProcessSet(ps)
            bad = [r for r in ps.ranks if not 0 <= r < size]
            if bad:
                raise errors.UnsupportedError(
                    f"process set {ps.ranks} names ranks {bad} outside 0..{size - 1}")
            sid = len(sets)
            sets[sid] = SetState(sid, tuple(ps.ranks),
                                 plane.split(formed.set0, rank in ps.ranks, rank))
            ps.bind(sid, rank)
            registry[sid] = ps
        backend = wrap_from_env(formed.host_plane, os.environ, rank)
        engine = Engine(plane, cfg, backend, sets,
                        caller_progress=_caller_progress(cfg.progress, formed.local_size),
                        abort_on_fatal=not formed.elastic)
        _state = ProcessState(cfg, formed.world, rank, size, formed.local_rank,
                              formed.local_size, formed.cross_rank, formed.cross_size, engine,
                              registry, homogeneous=homogeneous, comms=list(formed.comms),
                              host_plane=formed.host_plane, formed=formed)
        _state.watchdog = liveness.start(formed.world, rank, size, _peer_gone)
        path = Timeline.resolve(cfg.timeline, rank)
        if path:
            engine.set_timeline(Timeline(path, rank, cfg.timeline_mark_cycles))
        _install_hooks(cfg, size)
        log.debug("initialized: rank %d of %d (local %d/%d, cross %d/%d) on the %s controller "
                  "(%s), config %s", rank, size, formed.local_rank, formed.local_size,
                  formed.cross_rank, formed.cross_size, name, why, cfg)


def shutdown() -> None:
    """Stop the engine on this rank after all ranks agree (a no-op when not initialized)."""
    global _state
    with _lock:
        st = _state
        if st is None:
            return
        engine = st.engine
        if engine.fatal is None and engine.alive:
            try:
                engine.drive(requests.submit_control(engine, SHUTDOWN, "__shutdown__"))
            except errors.HvdcoreError as exc:
                log.debug("shutdown negotiation ended with %s", exc)
        # an elastic job's failed engine may be inside a collective with a dead peer until
        # Gloo notices: do not wait for it long (its thread is a daemon)
        failed_elastic = engine.fatal is not None and _elastic(st)
        engine.stop(timeout=1 if failed_elastic else 10)
        tl = engine.set_timeline(None)
        if tl is not None:
            tl.close()
        if st.watchdog is not None:
            st.watchdog.close()
        engine.close()
        close = getattr(st.host_plane, "close", None)
        if close is not None:
            # Freeing the shared window is collective over the node: skip it after a failure.
            close(collective=engine.fatal is None)
        for comm in st.comms:
            try:
                comm.Free()
            except Exception as exc:  # noqa: BLE001 - freeing during teardown is best effort
                log.debug("freeing a communicator failed: %s", exc)
        if st.formed is not None and st.formed.close is not None:
            st.formed.close()
        for ps in st.sets.values():
            ps.process_set_id = None
        global_process_set.bind(0, -1)
        global_process_set.process_set_id = 0
        checked_allreduces.clear()
        _state = None


def is_initialized() -> bool:
    """True between ``init()`` and ``shutdown()``."""
    return _state is not None


def rank() -> int:
    """This process's rank in the job (0..size-1)."""
    return _require().rank


def size() -> int:
    """Number of ranks in the job."""
    return _require().size


def local_rank() -> int:
    """Rank among the processes on this node (use it to pick a GPU)."""
    return _require().local_rank


def _caller_progress(mode: str, local_size: int) -> bool:
    """Resolve ``HVDCORE_PROGRESS``: caller progress unless this rank has 2+ CPUs of its own."""
    if mode != "auto":
        return mode == "caller"
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    # Bound ranks see their own CPUs; unbound ones share the node's with local_size others.
    return cpus / max(local_size, 1) < 2


def local_size() -> int:
    """Number of ranks on this node."""
    return _require().local_size


def cross_rank() -> int:
    """Index of this node among the nodes (rank in the group of equal local ranks)."""
    return _require().cross_rank


def cross_size() -> int:
    """Number of nodes (ranks sharing this local rank)."""
    return _require().cross_size


def is_homogeneous() -> bool:
    """True when every node runs the same number of ranks (Horovod's ``is_homogeneous``)."""
    return _require().homogeneous


def mpi_threads_supported() -> bool:
    """True when MPI provides MPI_THREAD_MULTIPLE (False on the Gloo controller)."""
    st = _require()
    if st.formed is None or st.formed.controller != "mpi":
        return False
    from mpi4py import MPI

    return MPI.Query_thread() == MPI.THREAD_MULTIPLE


def controller() -> str:
    """The controller this job runs on: ``"mpi"`` or ``"gloo"``."""
    st = _require()
    return st.formed.controller if st.formed is not None else "mpi"


@documented(raises=INIT_RAISES)
def start_timeline(file_path: str, mark_cycles: bool = False) -> None:
    """Start writing a Chrome-trace timeline (see HVDCORE_TIMELINE for file vs directory)."""
    st = _require()
    path = Timeline.resolve(file_path, st.rank)
    old = st.engine.set_timeline(Timeline(path, st.rank, mark_cycles) if path else None)
    if old is not None:
        old.close()
    _install_sigterm()


def stop_timeline() -> None:
    """Stop the timeline and close its file (valid JSON)."""
    st = _require()
    old = st.engine.set_timeline(None)
    if old is not None:
        old.close()


# -- failure hooks ----------------------------------------------------------------------------

def _close_timeline() -> None:
    st = _state
    if st is not None and st.engine.timeline is not None:
        st.engine.timeline.close()


def _excepthook(etype: type[BaseException], value: BaseException, tb: Any) -> None:
    global _aborting
    st = _state
    if st is None or _aborting:
        sys.__excepthook__(etype, value, tb)
        return
    _aborting = True
    text = "".join(traceback.format_exception(etype, value, tb)).rstrip("\n")
    label = f"[hvdcore rank {st.rank}] "
    report = (f"{label}uncaught {etype.__name__} on rank {st.rank} of {st.size}; aborting the "
              "job so the other ranks do not wait forever:\n"
              + "\n".join(label + line for line in text.splitlines()) + "\n")
    # also to the process's own stderr: torch.distributed's hook (init_process_group: the
    # torch planes) calls this one with sys.stderr swapped for a buffer it writes out only
    # after we return, and Abort below does not return
    for stream in {id(s): s for s in (sys.stderr, sys.__stderr__) if s is not None}.values():
        try:
            stream.write(report)
            stream.flush()
        except (OSError, ValueError):
            pass
    _close_timeline()
    if liveness.victim_of_a_dead_peer(tb):
        # the watchdog's abort_job ends this rank after its grace, so that the launcher sees
        # the dead rank's exit first and reports its exit code; abort here only if it did not
        time.sleep(liveness.GRACE_S + liveness.ABORT_TIMEOUT_S)
    st.world.Abort(1)


def leave_generation(reason: str) -> None:
    """Elastic jobs: end this generation on this rank after a failure. Every pending and
    later call raises RankFailedError(``reason``), and this rank's connections of the job are
    cut so that no peer waits for it inside a collective (a no-op when not initialized)."""
    st = _state
    if st is None:
        return
    st.engine.fail(errors.RankFailedError(reason))
    if st.formed is not None and st.formed.cut is not None:
        st.formed.cut()


def _elastic(st: ProcessState) -> bool:
    return st.formed is not None and st.formed.elastic


def _peer_gone(message: str) -> None:
    """The liveness watchdog saw another rank's process end: end this rank's job too (in an
    elastic job, only this generation's engine: its calls raise, hvdcore.elastic re-forms)."""
    st = _state
    if st is None or _aborting:
        return
    if _elastic(st):
        log.warning("%s; this generation of the elastic job ends", message)
        leave_generation(f"rank {st.rank}: {message}")
        return
    liveness.abort_job(st.world, message, _close_timeline)


def _install_sigterm() -> None:
    if threading.current_thread() is not threading.main_thread():
        return
    previous = signal.getsignal(signal.SIGTERM)
    if getattr(previous, "_hvdcore", False):
        return

    def handler(signum: int, frame: Any) -> None:
        _close_timeline()
        signal.signal(signal.SIGTERM, previous if callable(previous) else signal.SIG_DFL)
        if callable(previous):
            previous(signum, frame)
        else:
            signal.raise_signal(signum)

    handler._hvdcore = True  # type: ignore[attr-defined]
    signal.signal(signal.SIGTERM, handler)


def _install_hooks(cfg: Any, world_size: int) -> None:
    global _hooks_installed
    if cfg.abort_on_exception and world_size > 1:
        sys.excepthook = _excepthook
    if cfg.timeline:
        _install_sigterm()
    if not _hooks_installed:
        atexit.register(_atexit)
        _hooks_installed = True


def _atexit() -> None:
    if _state is not None:
        try:
            shutdown()
        finally:
            _close_timeline()
