"""``hvdcore/engine/rounds.py``: response-cache hits, their rounds and the one execution order,
driven through the real engine (``hvdcore.engine.loop.Engine``) in this process. No MPI:
the control and data planes are the in-process doubles of ``engine_doubles``.

- One rank: requests go in through ``hvdcore.engine.requests`` as the API layer sends them
  (blocking calls, async calls then ``wait``, rejections, joins, a registered data plane).
- Two ranks: two engines in this process whose cycles the test runs in a fixed order (it
  holds both engines, so their own threads never step): a late peer, a tensor only one rank
  offered, and a cached name that one rank changed. Every result and error is checked; how a
  request got there (which fast path, how many rounds) is not.

The steady path (a round and the data call as one call of the MPI control plane) needs MPI:
``tests/test_steady_path.py`` and ``tests/test_steady_batch.py`` run it at 1-3 ranks.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from engine_doubles import FakeBackend, OneRankPlane, Wire, load_config, world

from hvdcore import errors
from hvdcore.backends.base import DeviceBuffer
from hvdcore.engine import requests
from hvdcore.engine.autotune import TunedParams
from hvdcore.engine.cache import HIT, MISS
from hvdcore.engine.handle import Handle
from hvdcore.engine.loop import Engine
from hvdcore.engine.messages import ALLREDUCE, JOIN, SHUTDOWN, Meta, ReduceOp
from hvdcore.engine.timeline import Timeline

_STEPS = 2000  # a bound on the cycles a test runs while waiting: a bug fails, never hangs
_WAIT = 30.0  # seconds: bounds a wait only so that a broken build fails, not hangs


def _meta(name: str, shape: tuple[int, ...] = (3,), op: int = ReduceOp.SUM,
          device: str = "", **kw: object) -> Meta:
    return Meta(0, name, ALLREDUCE, "float32", shape, op, device=device, **kw)


def _shutdown(engine: Engine) -> None:
    if engine.fatal is None and engine.alive and not engine.run.stopped:
        engine.drive(requests.submit_control(engine, SHUTDOWN, "__shutdown__"))
    engine.stop(10)
    assert not engine.alive


@pytest.fixture(params=["caller", "thread"])
def one(request: pytest.FixtureRequest) -> Iterator[Engine]:
    """The engine of a one-rank job, with caller or thread progress."""
    engine = Engine(OneRankPlane(), load_config(), FakeBackend(), {0: world(1)},
                    caller_progress=request.param == "caller")
    yield engine
    _shutdown(engine)


# -- one rank ---------------------------------------------------------------------------------

def test_repeated_blocking_calls_are_cached_and_each_gets_its_own_result(one: Engine) -> None:
    meta = _meta("w", postscale=3.0)
    results = []
    for step in range(5):
        x = np.full(3, step, np.float32)
        results.append(requests.allreduce(one, meta, x, None))
        assert x.tolist() == [step] * 3
    assert [r.tolist() for r in results] == [[3.0 * s] * 3 for s in range(5)]
    assert one.cache.lookup(meta) == (HIT, 0)
    out = np.empty(3, np.float32)
    assert requests.allreduce(one, _meta("w", postscale=3.0), np.ones(3, np.float32), out) is out
    assert out.tolist() == [3.0] * 3


def test_async_calls_then_wait_are_fused_hits(one: Engine) -> None:
    names = ["g/a", "g/b", "g/c"]
    metas = [_meta(n, (i + 1,), ReduceOp.AVERAGE, postscale=2.0) for i, n in enumerate(names)]
    for step in range(4):
        xs = [np.full(i + 1, step + i, np.float32) for i in range(3)]
        handles = [requests.allreduce_async(one, m, x, None)
                   for m, x in zip(metas, xs, strict=True)]
        got = [requests.wait(one, h) for h in handles]
        assert [g.tolist() for g in got] == [[2.0 * (step + i)] * (i + 1) for i in range(3)]
    assert all(one.cache.lookup(m)[0] == HIT for m in metas)


def test_a_new_shape_for_a_cached_name_drops_the_old_entry(one: Engine) -> None:
    old = _meta("w", (3,))
    requests.allreduce(one, old, np.ones(3, np.float32), None)
    requests.allreduce(one, old, np.ones(3, np.float32), None)
    new = _meta("w", (2, 2))
    for step in range(3):
        got = requests.allreduce(one, new, np.full((2, 2), step, np.float32), None)
        assert got.shape == (2, 2) and got.tolist() == [[step] * 2] * 2
    assert one.cache.lookup(new)[0] == HIT and one.cache.lookup(new)[1] != 0
    assert one.cache.lookup(_meta("w", (3,)))[0] != HIT


def test_unnamed_calls_are_never_cached(one: Engine) -> None:
    for i in range(3):
        meta = _meta(f"allreduce#{i}")
        assert requests.allreduce(one, meta, np.full(3, i, np.float32), None).tolist() == [i] * 3
        assert one.cache.lookup(meta) == (MISS, -1)
    assert len(one.cache) == 0


def test_join_turns_the_cache_off_until_it_completes(one: Engine) -> None:
    meta = _meta("w")
    requests.allreduce(one, meta, np.ones(3, np.float32), None)
    pending = requests.allreduce_async(one, _meta("w"), np.full(3, 4.0, np.float32), None)
    last = requests.wait(one, requests.submit_control(one, JOIN, "join"))
    assert last == 0  # the last rank to join: the only one
    assert requests.wait(one, pending).tolist() == [4.0] * 3
    assert one.cache.enabled
    assert requests.allreduce(one, meta, np.full(3, 5.0, np.float32), None).tolist() == [5.0] * 3


def test_a_rejected_call_raises_and_the_engine_stays_usable(one: Engine) -> None:
    meta = _meta("w")
    requests.allreduce(one, meta, np.ones(3, np.float32), None)
    with pytest.raises(ValueError, match="bad array"):
        requests.reject(one, 0, ALLREDUCE, ["w"], ValueError("bad array"))
    assert requests.allreduce(one, meta, np.full(3, 2.0, np.float32), None).tolist() == [2.0] * 3


def test_a_pending_name_cannot_be_reused_until_it_completes(one: Engine) -> None:
    assert one.begin_drive()  # (held: the engine thread cannot run the first one meanwhile)
    try:
        first_h = requests.allreduce_async(one, _meta("d"), np.ones(3, np.float32), None)
        with pytest.raises(errors.ArgumentError, match="'d': a tensor with the same name is"):
            requests.allreduce_async(one, _meta("d"), np.ones(3, np.float32), None)
    finally:
        one.end_drive()
    assert requests.wait(one, first_h).tolist() == [1.0] * 3
    again = requests.allreduce_async(one, _meta("d"), np.full(3, 2.0, np.float32), None)
    assert requests.wait(one, again).tolist() == [2.0] * 3


def test_a_registered_plane_runs_its_own_tensors_cached_or_not(one: Engine) -> None:
    plane = FakeBackend(name="other")
    one.register_backend("other", plane)
    with pytest.raises(errors.ArgumentError, match="already registered"):
        one.register_backend("other", FakeBackend())
    assert one.devices == ["", "other"]
    meta = _meta("t", device="other")
    for step in range(3):
        x = np.full(3, step, np.float32)
        buf = DeviceBuffer(x, "other", np.dtype(np.float32), (3,), x.ctypes.data)
        assert requests.allreduce(one, meta, buf, None).tolist() == [step] * 3
    assert one.cache.lookup(meta)[0] == HIT
    assert {c[0] for c in plane.calls} == {"allreduce"}
    one.unregister_backend("other")
    assert plane.sets[-1] == ("remove", 0) and one.devices == [""]


def test_after_shutdown_submissions_are_refused(one: Engine) -> None:
    requests.allreduce(one, _meta("w"), np.ones(3, np.float32), None)
    _shutdown(one)
    with pytest.raises(errors.ShutdownError, match="shut down"):
        requests.allreduce_async(one, _meta("x"), np.ones(3, np.float32), None)


def test_a_data_plane_error_on_a_first_call_reaches_the_caller_only() -> None:
    backend = FakeBackend()
    engine = Engine(OneRankPlane(), load_config(), backend, {0: world(1)},
                    caller_progress=True)
    try:
        backend.fail_next(1, RuntimeError("link down"))
        with pytest.raises(RuntimeError, match="link down"):
            requests.allreduce(engine, _meta("a"), np.ones(3, np.float32), None)
        assert requests.allreduce(engine, _meta("b"), np.ones(3, np.float32), None).tolist() \
            == [1.0] * 3
        assert requests.allreduce(engine, _meta("a"), np.ones(3, np.float32), None).tolist() \
            == [1.0] * 3
    finally:
        _shutdown(engine)


def _drive_bounded(engine: Engine, handle: Handle) -> None:
    """Run this engine's cycles on this thread until ``handle`` is done or ``_STEPS`` ran."""
    assert engine.begin_drive()
    try:
        for _ in range(_STEPS):
            if handle.done():
                break
            engine._step()  # (the cycle itself: drive_until would wait for ever)
    finally:
        engine.end_drive()


def test_a_data_plane_error_in_a_cached_round_leaves_the_engine_usable(tmp_path) -> None:
    backend = FakeBackend()
    engine = Engine(OneRankPlane(), load_config(), backend, {0: world(1)},
                    caller_progress=True)
    try:
        meta = _meta("a")
        requests.allreduce(engine, meta, np.ones(3, np.float32), None)  # cached from now on
        # (a timeline keeps the hit off the fast paths: it runs in the cycle's round)
        engine.set_timeline(Timeline(str(tmp_path / "tl.json"), 0))
        backend.fail_next(1, RuntimeError("link down"))
        h = requests.allreduce_async(engine, meta, np.ones(3, np.float32), None)
        with pytest.raises(RuntimeError, match="link down"):
            requests.wait(engine, h)
        engine.set_timeline(None).close()  # type: ignore[union-attr]
        nxt = requests.allreduce_async(engine, _meta("b"), np.full(3, 2.0, np.float32), None)
        _drive_bounded(engine, nxt)
        assert nxt.done() and nxt.wait().tolist() == [2.0] * 3
    finally:
        if engine.progress.queue or engine.dispatcher.inflight:  # wedged: no negotiation
            engine.run.stopped = True
        _shutdown(engine)


def test_a_data_plane_error_on_the_engine_thread_fails_the_request(caplog) -> None:
    """As Horovod's background loop does (``PerformOperation`` finishes the entries of an
    operation that threw with its error), the request whose data call raised gets that error,
    on whichever thread the cycle ran, and the engine goes on: no abort, the next call works."""
    backend = FakeBackend()
    plane = OneRankPlane()
    engine = Engine(plane, load_config(), backend, {0: world(1)}, caller_progress=False)
    try:
        backend.fail_next(1, RuntimeError("link down"))
        h = requests.allreduce_async(engine, _meta("a"), np.ones(3, np.float32), None)
        with pytest.raises(RuntimeError, match="link down"):
            h.wait(_WAIT)  # (not driving: the engine thread ran the cycle)
        assert engine.fatal is None and engine.alive and plane.aborted is None
        assert "the data call of 'a' failed (RuntimeError: link down)" in caplog.text
        h = requests.allreduce_async(engine, _meta("a"), np.full(3, 2, np.float32), None)
        assert h.wait(_WAIT).tolist() == [2.0] * 3
    finally:
        _shutdown(engine)


# -- two ranks in this process ------------------------------------------------------------------

class Job:
    """Two engines of one in-process job; the test holds both and runs their cycles."""

    def __init__(self) -> None:
        self.wire = Wire(2)
        self.backends = [FakeBackend(), FakeBackend()]
        self.engines = [Engine(self.wire.plane(r), load_config(), self.backends[r],
                               {0: world(2, r)}, caller_progress=True) for r in (0, 1)]
        for e in self.engines:
            assert e.begin_drive()

    def run(self, handles: list[Handle], ranks: tuple[int, ...] = (0, 1)) -> bool:
        """Cycle ``ranks`` in turn until every handle is done (False after ``_STEPS``)."""
        for _ in range(_STEPS):
            if all(h.done() for h in handles):
                return True
            for r in ranks:
                self.engines[r]._step()
        return all(h.done() for h in handles)

    def submit(self, rank: int, meta: Meta, x: np.ndarray) -> Handle:
        return requests.allreduce_async(self.engines[rank], meta, x, None)

    def close(self) -> None:
        hs = [requests.submit_control(e, SHUTDOWN, "__shutdown__") for e in self.engines]
        done = self.run(hs)
        for e in self.engines:
            if not done:
                e.run.stopped = True
            e.end_drive()
            e.stop(10)
        assert done


@pytest.fixture
def job() -> Iterator[Job]:
    j = Job()
    yield j
    j.close()


def _cache_everywhere(job: Job, *names: str) -> None:
    hs = [job.submit(r, _meta(n), np.ones(3, np.float32)) for n in names for r in (0, 1)]
    assert job.run(hs)
    for h in hs:
        assert h.wait().tolist() == [2.0] * 3  # (each rank's fake plane: two of its tensor)
    for e in job.engines:
        assert all(e.cache.lookup(_meta(n))[0] == HIT for n in names)


def test_a_cached_tensor_waits_for_the_late_rank(job: Job) -> None:
    _cache_everywhere(job, "a")
    early = job.submit(0, _meta("a"), np.full(3, 3.0, np.float32))
    assert not job.run([early], ranks=(0,))  # rank 1 has not offered it: no result
    late = job.submit(1, _meta("a"), np.full(3, 5.0, np.float32))
    assert job.run([early, late])
    assert early.wait().tolist() == [6.0] * 3 and late.wait().tolist() == [10.0] * 3


def test_of_two_cached_tensors_only_the_one_both_offered_runs(job: Job) -> None:
    _cache_everywhere(job, "a", "b")
    a0, b0 = (job.submit(0, _meta(n), np.full(3, 1.0, np.float32)) for n in "ab")
    a1 = job.submit(1, _meta("a"), np.full(3, 2.0, np.float32))
    assert job.run([a0, a1])
    assert a0.wait().tolist() == [2.0] * 3 and a1.wait().tolist() == [4.0] * 3
    assert not job.run([b0])  # rank 1 has not offered "b"
    b1 = job.submit(1, _meta("b"), np.full(3, 3.0, np.float32))
    assert job.run([b0, b1])
    assert b0.wait().tolist() == [2.0] * 3 and b1.wait().tolist() == [6.0] * 3


def test_a_cached_name_one_rank_changed_is_a_mismatch_on_both(job: Job) -> None:
    _cache_everywhere(job, "a", "b")
    same = job.submit(0, _meta("a"), np.ones(3, np.float32))
    changed = job.submit(1, _meta("a", (4,)), np.ones(4, np.float32))
    assert job.run([same, changed])
    for h in (same, changed):
        with pytest.raises(errors.MismatchError,
                           match=r"mismatched shape for allreduce 'a': rank 0 submitted \[3\]; "
                                 r"rank 1 submitted \[4\]"):
            h.wait()
    for e in job.engines:
        assert e.cache.lookup(_meta("a"))[0] != HIT  # dropped everywhere
        assert e.cache.lookup(_meta("b"))[0] == HIT  # the others stay
    hs = [job.submit(r, _meta("a", (4,)), np.full(4, r + 1.0, np.float32)) for r in (0, 1)]
    hs += [job.submit(r, _meta("b"), np.full(3, 7.0, np.float32)) for r in (0, 1)]
    assert job.run(hs)
    assert [h.wait().tolist() for h in hs] == [[2.0] * 4, [4.0] * 4, [14.0] * 3, [14.0] * 3]


# -- the autotuner's cache switch (its parameters in rank 0's next list) ----------------------

def _switch_cache(job: Job, on: bool) -> None:
    """Rank 0's coordinator sends parameters that switch the cache, as the autotuner does."""
    cfg = job.engines[0].cfg
    job.engines[0].coordinator.tune(TunedParams(cfg.fusion_threshold, cfg.cycle_time,
                                                cache_enabled=on))


def _repeat(job: Job, name: str, times: int) -> None:
    for step in range(times):
        hs = [job.submit(r, _meta(name), np.full(3, step + r, np.float32)) for r in (0, 1)]
        assert job.run(hs)
        assert [h.wait().tolist() for h in hs] == [[2.0 * step] * 3, [2.0 * step + 2] * 3]


def test_the_cache_switched_off_under_a_waiting_hit_is_dropped_on_both_ranks(job: Job) -> None:
    _cache_everywhere(job, "a", "b")
    early = job.submit(0, _meta("a"), np.full(3, 3.0, np.float32))
    assert not job.run([early], ranks=(0,))  # a hit on rank 0, its round out
    _switch_cache(job, on=False)
    for r in (0, 1):  # rank 0 sends the list that switches it off (after the round of its
        for _ in range(50):  # hit: it runs it when rank 1 has posted that round); rank 1 runs it
            job.engines[r]._step()
    assert not job.engines[1].cache.enabled and job.engines[0].cache.enabled
    late = job.submit(1, _meta("a"), np.full(3, 5.0, np.float32))  # not a hit on rank 1
    assert job.run([early, late])
    assert early.wait().tolist() == [6.0] * 3 and late.wait().tolist() == [10.0] * 3
    _repeat(job, "a", 3)
    for e in job.engines:
        assert not e.cache.enabled and e.cache.live() == 0
        assert e.cache.lookup(_meta("a")) == (MISS, -1) and e.cache.lookup(_meta("b"))[0] == MISS
    _switch_cache(job, on=True)
    _repeat(job, "a", 3)  # cached anew after the switch, then a hit
    for e in job.engines:
        assert e.cache.enabled and e.cache.lookup(_meta("a")) == (HIT, 2)  # ids not reused


def test_the_cache_goes_back_on_only_after_its_ids_are_dropped_everywhere(job: Job) -> None:
    _cache_everywhere(job, "a")
    _switch_cache(job, on=False)
    coord = job.engines[0].coordinator
    for _ in range(50):  # rank 0 alone: the list goes out, the round dropping "a" cannot run
        job.engines[0]._step()
    assert coord.params_due is None and not job.engines[0].cache.enabled
    _switch_cache(job, on=True)
    for _ in range(50):
        job.engines[0]._step()
    assert coord.params_due is not None and job.engines[0].cache.live() == 1  # held
    _repeat(job, "a", 3)
    assert coord.params_due is None
    for e in job.engines:
        assert e.cache.enabled and e.cache.lookup(_meta("a")) == (HIT, 1)
