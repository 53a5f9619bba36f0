"""``hvdcore/engine/progress.py``: the submission queue, who runs the engine's cycles (a waiting
caller or the engine thread), and what happens when a cycle fails. The cycle is a stand-in
that completes the queued requests' handles; no MPI, no engine.

Waits are bounded (``_WAIT``) only so that a broken build fails instead of hanging."""

from __future__ import annotations

import threading

import pytest

from hvdcore import errors
from hvdcore.engine.executor import Request, first
from hvdcore.engine.handle import Handle
from hvdcore.engine.messages import ALLREDUCE, Meta
from hvdcore.engine.progress import Progress, RunState

_WAIT = 10.0


def _req(name: str = "x") -> Request:
    return Request(Meta(0, name, ALLREDUCE), None, None, Handle(1, first, name), 0)


class Cycle:
    """A stand-in engine cycle: each step completes what was queued with the name of the
    thread that ran it (after ``delay_steps`` idle steps), or raises ``fail``."""

    def __init__(self, delay_steps: int = 0) -> None:
        self.progress: Progress | None = None
        self.delay_steps = delay_steps
        self.pending: list[Request] = []
        self.fail: BaseException | None = None
        self.crashed: list[BaseException] = []
        self.fatal_exits = threading.Event()

    def make(self, run: RunState | None = None, caller: bool = True) -> Progress:
        self.progress = Progress(run or RunState(), self.step, self.busy, self.crashed.append,
                                 self.fatal_exits.set, caller, rank=0)
        return self.progress

    def step(self) -> bool:
        assert self.progress is not None
        if self.fail is not None:
            raise self.fail
        self.pending += self.progress.take()
        if not self.pending:
            return False
        if self.delay_steps:
            self.delay_steps -= 1
            return False
        for r in self.pending:
            r.handle.set_part(r.part, threading.current_thread().name)
        self.pending = []
        return True

    def busy(self) -> bool:
        return bool(self.pending)


# -- the queue --------------------------------------------------------------------------------

def test_submit_take_take_for_and_requeue() -> None:
    p = Cycle().make()
    a, b, c = _req("a"), _req("b"), _req("c")
    p.submit([a, b], stamp=12.5)
    assert a.t_submit == b.t_submit == 12.5 and p.queue == [a, b]
    assert p.take_for(c.handle) is None and p.queue == [a, b]  # not there: untouched
    assert p.take_for(b.handle) == [a, b] and p.queue == []
    p.submit([c], 0.0)
    p.requeue([a, b])
    assert p.take() == [a, b, c] and p.take() == []
    p.submit([a], 0.0)
    assert p.fail_queued() == [a] and p.queue == []


def test_submit_refuses_after_a_fatal_error_or_a_shutdown() -> None:
    run = RunState()
    p = Cycle().make(run)
    run.stopped = True
    with pytest.raises(errors.ShutdownError, match="rank 0: hvdcore engine is shut down"):
        p.submit([_req()], 0.0)
    run.fatal = errors.RankFailedError("rank 1 died")
    with pytest.raises(errors.RankFailedError, match="rank 1 died"):
        p.submit([_req()], 0.0)
    assert p.queue == []


# -- a caller drives ----------------------------------------------------------------------------

def test_a_waiting_caller_runs_the_cycles_itself() -> None:
    cyc = Cycle(delay_steps=3)  # a late peer: a few cycles without progress
    p = cyc.make()
    r = _req()
    p.submit([r], 0.0)
    assert p.drive(r.handle) == threading.current_thread().name
    r2 = _req("y")
    assert p.begin_drive()
    try:
        p.submit([r2], 0.0)
        p.drive_until(r2.handle)
        assert p.drive(r2.handle) == threading.current_thread().name  # (a call inside a call)
    finally:
        p.end_drive()


def test_one_driver_at_a_time_and_the_other_waiter_still_gets_its_result() -> None:
    p = Cycle().make()
    assert p.begin_drive()
    started, result = threading.Event(), {}
    r = _req()

    def other() -> None:
        assert not p.begin_drive()  # this thread holds the engine
        started.set()
        result["value"] = p.drive(r.handle)  # waits, then drives once the engine is free

    t = threading.Thread(target=other, name="other-waiter")
    t.start()
    assert started.wait(_WAIT)
    p.submit([r], 0.0)
    p.end_drive()
    t.join(_WAIT)
    assert not t.is_alive() and result["value"] == "other-waiter"


def test_run_alone_runs_a_stage_as_the_driver_and_gives_the_engine_back() -> None:
    """A caller's shortcut: its result; None (nothing run) while another thread drives; a
    pending handle driven to its result when blocking, returned as it is otherwise; the engine
    free again after each, also when the stage raises."""
    p = Cycle().make()
    seen: list[tuple] = []

    def stage(meta: object, arr: object, out: object) -> object:
        seen.append((meta, arr, out, p.driving()))
        return arr

    assert p.run_alone(stage, True, "m", 7, None) == 7 and seen == [("m", 7, None, True)]
    assert not p.driving() and p.begin_drive()
    try:
        other: list[object] = []
        t = threading.Thread(target=lambda: other.append(p.run_alone(stage, True, "m", 8, None)))
        t.start()
        t.join(_WAIT)
        assert other == [None] and len(seen) == 1  # busy: the stage did not run
    finally:
        p.end_drive()

    def pending(meta: object, arr: object, out: object) -> Handle:
        r = _req(str(meta))
        p.submit([r], 0.0)
        return r.handle

    assert p.run_alone(pending, True, "a", None, None) == threading.current_thread().name
    h = p.run_alone(pending, False, "b", None, None)
    assert isinstance(h, Handle) and not h.done()
    assert p.drive(h) == threading.current_thread().name  # (the engine was given back)

    def raising(meta: object, arr: object, out: object) -> None:
        raise errors.ArgumentError("bad")

    with pytest.raises(errors.ArgumentError, match="bad"):
        p.run_alone(raising, True, "c", None, None)
    assert p.begin_drive()
    p.end_drive()


def test_hold_keeps_cycles_out_and_lets_the_driver_through() -> None:
    p = Cycle().make()
    with p.hold():
        seen: list[bool] = []
        t = threading.Thread(target=lambda: seen.append(p.begin_drive()))
        t.start()
        t.join(_WAIT)
        assert seen == [False]
    assert p.begin_drive()
    try:
        with p.hold():  # the driver itself may change the engine's parts
            pass
    finally:
        p.end_drive()


def test_step_once_runs_a_cycle_only_when_the_engine_is_free() -> None:
    p = Cycle().make()
    r = _req()
    p.submit([r], 0.0)
    taken, release = threading.Event(), threading.Event()

    def holder() -> None:  # another thread drives the engine until told to let go
        assert p.begin_drive()
        taken.set()
        release.wait(_WAIT)
        p.end_drive()

    t = threading.Thread(target=holder)
    t.start()
    assert taken.wait(_WAIT)
    p.step_once()
    assert not r.handle.done()
    release.set()
    t.join(_WAIT)
    p.step_once()
    assert r.handle.done()


def test_drive_stops_when_the_run_stops_or_fails() -> None:
    run = RunState()
    cyc = Cycle(delay_steps=10**9)  # never completes
    p = cyc.make(run)
    r = _req()
    p.submit([r], 0.0)
    assert p.begin_drive()
    try:
        run.stopped = True
        p.drive_until(r.handle)  # returns: no more cycles
    finally:
        p.end_drive()
    assert not r.handle.done()
    run.stopped, run.fatal = False, errors.RankFailedError("gone")
    assert not p.begin_drive()  # a failed engine is not driven
    r.handle.fail(run.fatal)
    with pytest.raises(errors.RankFailedError):
        p.drive(r.handle)


# -- the engine thread --------------------------------------------------------------------------

@pytest.mark.parametrize("caller", [False, True], ids=["thread", "caller"])
def test_the_engine_thread_completes_requests_nobody_waits_for(caller: bool) -> None:
    """Thread progress: a submission wakes it. Caller progress: it steps in after a grace
    period without a driver, so a forgotten handle still completes."""
    run = RunState()
    p = Cycle().make(run, caller=caller)
    p.start()
    try:
        r = _req()
        p.submit([r], 0.0)
        assert r.handle.wait_done(_WAIT)
        assert r.handle.wait() == "hvdcore-engine"
        assert p.alive
    finally:
        run.stopped = True
        p.join(_WAIT)
    assert not p.alive


def test_a_cycle_that_raises_on_the_engine_thread_is_reported_and_ends_the_job() -> None:
    cyc = Cycle()
    p = cyc.make(caller=False)
    cyc.fail = ValueError("broken cycle")
    p.start()
    p.submit([_req()], 0.0)
    assert cyc.fatal_exits.wait(_WAIT)
    p.join(_WAIT)
    assert [str(e) for e in cyc.crashed] == ["broken cycle"] and not p.alive


def test_a_fatal_error_set_by_a_cycle_ends_the_engine_thread() -> None:
    run = RunState()
    cyc = Cycle()
    step = cyc.step

    def fatal_step() -> bool:
        run.fatal = errors.StallError("stall shutdown")
        return step()

    p = Progress(run, fatal_step, cyc.busy, cyc.crashed.append, cyc.fatal_exits.set, False, 0)
    cyc.progress = p
    p.start()
    p.submit([_req()], 0.0)
    assert cyc.fatal_exits.wait(_WAIT)
    p.join(_WAIT)
    assert not p.alive and cyc.crashed == []


def test_a_cycle_that_raises_on_the_callers_thread_reaches_the_caller() -> None:
    cyc = Cycle()
    p = cyc.make()
    r = _req()
    p.submit([r], 0.0)
    cyc.fail = ValueError("broken cycle")
    with pytest.raises(ValueError, match="broken cycle"):
        p.drive(r.handle)
    assert cyc.crashed == []
    cyc.fail = None
    assert p.drive(r.handle) == threading.current_thread().name  # the engine is free again


def test_with_caller_progress_the_engine_thread_leaves_queued_work_to_callers(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("hvdcore.engine.progress._CALLER_GRACE_S", 3600.0)
    run = RunState()
    p = Cycle().make(run, caller=True)
    p.start()
    try:
        assert p.begin_drive()  # a caller drove just now: the grace period runs
        p.end_drive()
        r = _req()
        p.submit([r], 0.0)
        # (an observation window, not a timing assertion: within the grace the engine
        # thread must not run the request at all; the next wait announces it)
        assert not r.handle.wait_done(1.0), f"run by {r.handle.wait()}"
        assert p.drive(r.handle) == threading.current_thread().name
    finally:
        run.stopped = True
        p.join(_WAIT)
