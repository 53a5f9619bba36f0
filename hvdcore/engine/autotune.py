"""The autotuner (``HVDCORE_AUTOTUNE``, ``hvdcorerun --autotune``): rank 0 tries fusion
thresholds and cycle times during the first steps of training and keeps the best.

Horovod's procedure, with its numbers: rank 0 counts the bytes of the allreduces it runs; a
*sample* ends when some tensor has been reduced ``steps_per_sample`` more times, and scores
bytes per microsecond since the sample began. Five samples make one *score* (their median).
The first ``warmup_samples`` scores are discarded; then each score is logged against the
parameters it was measured with, and the next parameters come from four fixed test points
(4 MiB/5 ms, 32 MiB/50 ms, 16 MiB/25 ms, 8 MiB/10 ms) and then from Bayesian optimisation over
0-64 MiB and 1-100 ms (:mod:`hvdcore.engine.bayes_opt`); ``bayes_opt_max_samples`` + 1 scored
sets make one search. Where the host data plane can take two levels (MPI, some node with
several ranks), the search runs again with hierarchical allreduce on, then with hierarchical
allgather on, then with both; and all of that first with the response cache off, then on
(:mod:`hvdcore.engine.tunables`: Horovod's chain). The set that scored best is kept for the
rest of the run. A parameter the user set (``--fusion-threshold-mb``, ``--cycle-time-ms``,
``--[no-]hierarchical-allreduce``/``allgather``, ``--cache-capacity`` or their variables) is
held, not tuned.

Parameters reach the other ranks in the coordinator's ordered lists (``Response`` of kind
``params``), so every rank switches at the same point of the one order of lists and rounds.
Switching the cache off drops its ids as a stale meta does (every rank sends them invalid in
its next round); parameters that switch it on again wait on rank 0 until that round has run
there, so that every rank runs it before it caches anything anew. There is no torus allreduce
(its column of the log is 0).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TextIO

from hvdcore.engine.messages import Response, response_bytes
from hvdcore.engine.tunables import Choice, JointSearch, Tunable, tune_chain

__all__ = ["Autotuner", "TunedParams", "install", "LOG_HEADER", "SAMPLES"]

log = logging.getLogger("hvdcore")

MIB = 1024 * 1024
SAMPLES = 5  # samples whose median is one score (Horovod's constant)
_BOUNDS = {"fusion_mb": (0.0, 64.0), "cycle_ms": (1.0, 100.0)}
_TEST_POINTS = ((4.0, 5.0), (32.0, 50.0), (16.0, 25.0), (8.0, 10.0))  # (MiB, ms)
LOG_HEADER = ("hierarchical_allreduce,hierarchical_allgather,torus_allreduce,cache_enabled,"
              "cycle_time_ms,tensor_fusion_threshold,score")
"""The autotune log's CSV header: Horovod's columns (threshold in MiB, score in bytes/us)."""


@dataclass(frozen=True)
class TunedParams:
    """What rank 0 tells every rank to use: fusion threshold (bytes), cycle time (ms),
    whether the host plane's global allreduce/allgather take two levels, and whether the
    response cache is on."""

    fusion_threshold: int
    cycle_time_ms: float
    hierarchical_allreduce: bool = False
    hierarchical_allgather: bool = False
    cache_enabled: bool = True

    def to_wire(self) -> list[Any]:
        """The ``per_rank`` of the ``params`` response that carries these."""
        return [self.fusion_threshold, self.cycle_time_ms, int(self.hierarchical_allreduce),
                int(self.hierarchical_allgather), int(self.cache_enabled)]

    @classmethod
    def from_wire(cls, values: list[Any]) -> TunedParams:
        """The parameters a ``params`` response carries (:meth:`to_wire`)."""
        threshold, cycle_ms, allreduce, allgather, cache = values
        return cls(int(threshold), float(cycle_ms), bool(allreduce), bool(allgather),
                   bool(cache))


@dataclass(frozen=True)
class _Settings:
    warmup: int
    steps_per_sample: int
    max_samples: int
    noise: float


def two_levels(plane: Any) -> bool:
    """Whether the host data ``plane`` (None: none) declares switchable two-level collectives
    (``PlaneCapabilities.two_levels``)."""
    return plane is not None and plane.capabilities.two_levels


def _choice(start: bool, free: bool) -> Choice:
    """A yes/no parameter from ``start`` (Horovod's: no first), held at ``start`` unless
    ``free``."""
    param = Choice([False, True])
    if not free:
        param.fix(start)
    return param


class Autotuner:
    """Rank 0's tuning state. Feed it what ran (:meth:`update`); publish what it returns.

    ``cfg``: the engine's configuration (the start values, what the user fixed, the
    autotune knobs); ``clock``: seconds (``time.perf_counter``); ``coordinator``: rank 0's
    :class:`~hvdcore.engine.coordinator.Coordinator`, which sends what :meth:`ran` chose;
    ``plane``: the host data plane (where its capabilities declare ``two_levels``, its
    ``enabled_allreduce`` and ``enabled_allgather`` are where the choices start). The cache
    is tried off, then on, unless its capacity was set (or is 0).
    """

    def __init__(self, cfg: Any, clock: Callable[[], float] = time.perf_counter,
                 coordinator: Any = None, plane: Any = None) -> None:
        self._clock = clock
        self.coordinator = coordinator
        self._set = _Settings(cfg.autotune_warmup_samples, cfg.autotune_steps_per_sample,
                              cfg.autotune_bayes_opt_max_samples,
                              cfg.autotune_gaussian_process_noise)
        start = {"fusion_mb": cfg.fusion_threshold / MIB, "cycle_ms": float(cfg.cycle_time)}
        user_set = {"fusion_mb": cfg.source("fusion_threshold") != "default",
                    "cycle_ms": cfg.source("cycle_time") != "default"}
        self._fixed = {k: v for k, v in start.items() if user_set[k]}
        self._free = [k for k in _BOUNDS if k not in self._fixed]
        self._joint: Tunable
        if self._free:
            self._joint = JointSearch([_BOUNDS[k] for k in self._free],
                                      [self._test_point(i) for i in range(len(_TEST_POINTS))],
                                      self._set.max_samples, self._set.noise)
        else:
            self._joint = Choice([[]])
            self._joint.fix([])
        splits = two_levels(plane)
        self._allreduce = _choice(splits and plane.enabled_allreduce,
                                  splits and cfg.source("hierarchical_allreduce") == "default")
        self._allgather = _choice(splits and plane.enabled_allgather,
                                  splits and cfg.source("hierarchical_allgather") == "default")
        cached = cfg.cache_capacity > 0
        self._cache = _choice(cached, cached and cfg.source("cache_capacity") == "default")
        self._cache_capacity = cfg.cache_capacity
        self._chain = [self._joint, self._allreduce, self._allgather, self._cache]
        self.active = any(p.tunable for p in self._chain)
        self._best_score = 0.0
        self._warmup_left = self._set.warmup
        self.measured = 0  # scores taken, warm-up included
        self.scored = 0  # scores logged (warm-up not included)
        # the sample under way: tensor counts, finished samples' scores, bytes, start time
        self._counts: dict[str, int] = {}
        self._scores: list[float] = []
        self._bytes = 0
        self._sample = 0
        self._sample_start = 0.0
        self._file: TextIO | None = None
        path = cfg.autotune_log
        if path:
            try:
                self._file = open(path, "w", encoding="utf-8")  # noqa: SIM115 - for the run
                self._file.write(LOG_HEADER + "\n")
                self._file.flush()
            except OSError as exc:  # (the peers are running: tune on, without the file)
                log.error("autotune: cannot write the log file %s (%s); tuning goes on "
                          "without it", path, exc.strerror or exc)
                self._file = None
        self._reset()
        if not self.active:
            log.info("autotune: the fusion threshold, the cycle time and the cache capacity "
                     "are set and no hierarchical choice is open: nothing to tune")
            self._close()

    # -- what the engine calls --------------------------------------------------------------

    def ran(self, names: Iterable[str], nbytes: int) -> Autotuner | None:
        """Rank 0 ran ``names`` (``nbytes`` bytes): new parameters go to the coordinator, to
        be sent first in its next list (no caller's shortcut runs until then:
        ``RoundScheduler.idle``). Returns this tuner while it tunes, then None."""
        params = self.update(names, nbytes)
        if params is not None:
            self.coordinator.tune(params)
        return self if self.active else None

    def ran_list(self, responses: list[Response]) -> Autotuner | None:
        """:meth:`ran` for a coordinator list about to run (its data responses)."""
        return self.ran([n for r in responses if r.dtype for n in r.names],
                        sum(response_bytes(r) for r in responses))

    def start(self) -> TunedParams:
        """The parameters of the first sample (the first test point)."""
        return self._params(best=False)

    def update(self, names: Iterable[str], nbytes: int) -> TunedParams | None:
        """Rank 0 ran ``names`` (``nbytes`` bytes in all): the parameters every rank must
        switch to now, or None (no change)."""
        if not self.active:
            return None
        counts = self._counts
        limit = (self._sample + 1) * self._set.steps_per_sample
        for name in names:
            seen = counts.get(name, 0)
            counts[name] = seen + 1
            if seen >= limit:
                now = self._clock()
                elapsed_us = max((now - self._sample_start) * 1e6, 1e-3)
                self._scores.append(self._bytes / elapsed_us)
                self._bytes = 0
                self._sample_start = now
                self._sample += 1
                break
        self._bytes += nbytes
        if self._sample < SAMPLES:
            return None
        score = sorted(self._scores)[SAMPLES // 2]
        return self._tune(score)

    # -- Horovod's Tune ---------------------------------------------------------------------

    def _tune(self, score: float) -> TunedParams | None:
        self.measured += 1
        if self._warmup_left > 0:
            self._warmup_left -= 1
            log.info("autotune: warming up (%d samples left)", self._warmup_left)
            self._reset()
            return None
        self.scored += 1
        in_force = self._params(best=False)
        self._write(in_force, score)
        log.info("autotune: %s: %.1f MB/s (score %d)", self._describe(in_force), score,
                 self.scored)
        self._best_score = max(self._best_score, score)
        if tune_chain(self._chain, score):
            self.active = False
            best = self._params(best=True)
            self._write(best, self._best_score)
            log.info("autotune: done after %d scores: best %s (%.1f MB/s); give these values "
                     "to skip tuning next time", self.scored, self._describe(best),
                     self._best_score)
            self._close()
        self._reset()
        return self._params(best=not self.active)

    # -- helpers ----------------------------------------------------------------------------

    def _reset(self) -> None:
        self._counts = {}
        self._scores = []
        self._bytes = 0
        self._sample = 0
        self._sample_start = self._clock()

    def _test_point(self, i: int) -> list[float]:
        point = dict(zip(_BOUNDS, _TEST_POINTS[i], strict=True))
        return [point[k] for k in self._free]

    def _params(self, best: bool) -> TunedParams:
        """The parameters in force (or, ``best``, the best set so far)."""
        pick = (lambda p: p.best) if best else (lambda p: p.value)
        values = dict(self._fixed)
        values.update(zip(self._free, pick(self._joint), strict=True))
        return TunedParams(int(values["fusion_mb"] * MIB), values["cycle_ms"],
                           bool(pick(self._allreduce)), bool(pick(self._allgather)),
                           bool(pick(self._cache)))

    def _describe(self, p: TunedParams) -> str:
        text = (f"--fusion-threshold-mb {p.fusion_threshold / MIB:.2f} "
                f"--cycle-time-ms {p.cycle_time_ms:.2f}")
        for flag, param, on in (("allreduce", self._allreduce, p.hierarchical_allreduce),
                                ("allgather", self._allgather, p.hierarchical_allgather)):
            if param.tunable:
                text += f" --{'' if on else 'no-'}hierarchical-{flag}"
        if self._cache.tunable:
            text += f" --cache-capacity {self._cache_capacity if p.cache_enabled else 0}"
        return text

    def _write(self, p: TunedParams, score: float) -> None:
        if self._file is None:
            return
        self._file.write(f"{int(p.hierarchical_allreduce)},{int(p.hierarchical_allgather)},0,"
                         f"{int(p.cache_enabled)},{p.cycle_time_ms:g},"
                         f"{p.fusion_threshold / MIB:g},{score:g}\n")
        self._file.flush()

    def _close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def install(cfg: Any, coordinator: Any, rounds: Any, dispatcher: Any, plane: Any = None) -> None:
    """Wire autotuning into an engine's parts: every rank applies the parameters its lists
    carry (``dispatcher``; the hierarchical choices on the host data ``plane``; the cache
    switch on ``rounds``' cache and hits); with ``HVDCORE_AUTOTUNE`` rank 0 (the one with a
    ``coordinator``) counts what runs (``rounds``) and sends the first parameters."""
    splits = two_levels(plane)
    cache = rounds.cache

    def use(p: TunedParams) -> None:
        cfg.set_tuned("fusion_threshold", p.fusion_threshold)
        cfg.set_tuned("cycle_time", p.cycle_time_ms)
        if splits:  # (the plane counts a switch: only a change is applied)
            if plane.enabled_allreduce != p.hierarchical_allreduce:
                plane.enabled_allreduce = p.hierarchical_allreduce
            if plane.enabled_allgather != p.hierarchical_allgather:
                plane.enabled_allgather = p.hierarchical_allgather
        if cache.tuned_on != p.cache_enabled:
            rounds.hits.invalid.update(cache.tune(p.cache_enabled))

    def may_send(p: TunedParams) -> bool:
        # Switching the cache on waits until the round that dropped the ids of its last
        # switch-off has run here: the list then comes after that round on every rank.
        return not (p.cache_enabled and not cache.tuned_on and cache.live())

    dispatcher.use_params = use
    if coordinator is not None:
        coordinator.params_gate = may_send
    if coordinator is not None and cfg.autotune:
        tuner = Autotuner(cfg, coordinator=coordinator, plane=plane)
        if tuner.active:
            rounds.tuner = tuner
            coordinator.tune(tuner.start())
