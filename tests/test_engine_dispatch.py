"""``hvdcore/engine/dispatch.py``: the requests awaiting a response, and each response kind to
its handler, with an in-process data plane and control plane (``engine_doubles``). No MPI."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from engine_doubles import FakeBackend, FakeComm, OneRankPlane, world

from hvdcore import errors
from hvdcore.engine.cache import HIT, MISS, ResponseCache
from hvdcore.engine.dispatch import Dispatcher
from hvdcore.engine.executor import Executor, Request, SetState, first
from hvdcore.engine.handle import Handle
from hvdcore.engine.messages import (
    ABORT,
    ADD_SET,
    ALLGATHER,
    ALLREDUCE,
    BARRIER,
    BROADCAST,
    ERROR,
    JOIN,
    REDUCESCATTER,
    REMOVE_SET,
    SHUTDOWN,
    STALL_WARNING,
    Meta,
    ReduceOp,
    Response,
)
from hvdcore.engine.progress import RunState


class Parts:
    """A dispatcher on rank 0 of a ``size``-rank world, and what it was built from."""

    def __init__(self, size: int = 1) -> None:
        self.backend = FakeBackend()
        self.plane = OneRankPlane()
        self.sets: dict[int, SetState] = {0: world(size)}
        self.cache = ResponseCache(16)
        self.run = RunState()
        self.aborted: list[BaseException] = []
        self.d = Dispatcher(0, Executor(self.backend, 0), self.sets, self.cache, self.plane,
                            self.run, self.aborted.append)

    def request(self, name: str, kind: str = ALLREDUCE, tensor: np.ndarray | None = None,
                set_id: int = 0, **meta: object) -> Request:
        req = Request(Meta(set_id, name, kind, **meta), tensor, None,
                      Handle(1, first, f"{kind} '{name}'"), 0)
        assert self.d.claim(req)
        return req


def _allreduce(*names: str, shape: tuple[int, ...] = (3,), set_id: int = 0,
               device: str = "") -> Response:
    return Response(kind=ALLREDUCE, set_id=set_id, names=list(names), dtype="float32",
                    shapes=[shape] * len(names), op=ReduceOp.SUM, device=device)


def test_a_second_pending_request_with_the_same_name_fails_alone() -> None:
    p = Parts()
    a = p.request("w", tensor=np.ones(3, np.float32))
    dup = Request(Meta(0, "w", ALLREDUCE), np.ones(3, np.float32), None,
                  Handle(1, first, "dup"), 0)
    assert not p.d.claim(dup)
    with pytest.raises(errors.ArgumentError,
                       match="rank 0: allreduce 'w': a tensor with the same name is still"):
        dup.handle.wait(0)
    # the same name in another process set is another request
    assert p.d.claim(Request(Meta(1, "w", ALLREDUCE), None, None, Handle(1, first, "x"), 0))
    p.d.run_one(_allreduce("w"))
    assert a.handle.wait(0).tolist() == [1.0] * 3


def test_allreduce_completes_its_requests_and_caches_the_response() -> None:
    p = Parts(size=2)
    a = p.request("a", tensor=np.full(3, 1.0, np.float32))
    b = p.request("b", tensor=np.full(3, 2.0, np.float32))
    p.d.run_one(_allreduce("a", "b"))
    assert a.handle.wait(0).tolist() == [2.0] * 3 and b.handle.wait(0).tolist() == [4.0] * 3
    assert not p.d.inflight
    meta = Meta(0, "a", ALLREDUCE, "float32", (3,), ReduceOp.SUM)
    assert p.cache.lookup(meta)[0] == HIT
    # a response that came from the cache is not inserted again; one of another set never
    c = p.request("c", tensor=np.ones(3, np.float32))
    p.d.run_one(_allreduce("c"), cached=True)
    assert c.handle.wait(0).tolist() == [2.0] * 3
    assert p.cache.lookup(Meta(0, "c", ALLREDUCE, "float32", (3,), ReduceOp.SUM))[0] == MISS


def test_a_response_for_a_set_this_rank_is_not_in_runs_nothing() -> None:
    p = Parts()
    p.sets[1] = SetState(1, (1, 2), None)
    for kind in (ALLREDUCE, BROADCAST):
        req = p.request(f"x-{kind}", kind, np.ones(3, np.float32), set_id=1)
        resp = Response(kind=kind, set_id=1, names=[f"x-{kind}"], dtype="float32",
                        shapes=[(3,)], op=ReduceOp.SUM, root=1)
        p.d.run_one(resp)
        assert not req.handle.done()
    assert p.backend.calls == []


def test_data_responses_go_to_the_executor_of_their_plane() -> None:
    p = Parts()
    p.sets[1] = SetState(1, (0,), FakeComm())
    other = FakeBackend(name="other")
    p.d.add_executor("other", Executor(other, 0))
    assert other.sets == [("add", 0), ("add", 1)]  # a group for every known set, in order
    host = p.request("h", tensor=np.ones(2, np.float32))
    dev = p.request("d", tensor=np.full(2, 3.0, np.float32), device="other")
    p.d.run_all([_allreduce("h", shape=(2,)), _allreduce("d", shape=(2,), device="other")])
    assert host.handle.wait(0).tolist() == [1.0, 1.0]
    assert dev.handle.wait(0).tolist() == [3.0, 3.0]
    assert [c[0] for c in p.backend.calls] == ["allreduce"]
    assert [c[0] for c in other.calls] == ["allreduce"]
    bc = p.request("bc", BROADCAST, np.arange(3), device="other")
    p.d.run_one(Response(kind=BROADCAST, set_id=0, names=["bc"], dtype="int64",
                         shapes=[(3,)], root=0, device="other"))
    assert bc.handle.wait(0).tolist() == [0, 1, 2] and other.calls[-1][0] == "broadcast"


@pytest.mark.parametrize("kind", [ALLGATHER, BROADCAST, REDUCESCATTER, BARRIER])
def test_other_data_kinds_reach_the_executor(kind: str) -> None:
    p = Parts()
    x = np.arange(4, dtype=np.float32)
    req = p.request("k", kind, x)
    p.d.run_one(Response(kind=kind, set_id=0, names=["k"], dtype="float32", shapes=[(4,)],
                         op=ReduceOp.SUM, root=0, per_rank=[[4]]))
    got = req.handle.wait(0)
    if kind == BARRIER:
        assert got is None
    else:
        assert got.tolist() == x.tolist()
    assert not p.d.inflight


@pytest.mark.parametrize(("etype", "cls"), [
    ("MismatchError", errors.MismatchError), ("ArgumentError", errors.ArgumentError),
    ("UnsupportedError", errors.UnsupportedError), ("NoSuchError", errors.HvdcoreError),
    ("", errors.HvdcoreError)])
def test_an_error_response_fails_its_request_with_the_named_class(etype: str, cls) -> None:
    p = Parts()
    bad = p.request("bad", tensor=np.ones(3, np.float32))
    good = p.request("good", tensor=np.ones(3, np.float32))
    p.d.run_all([Response(kind=ERROR, set_id=0, names=["bad"], message="shapes differ",
                          error_type=etype), _allreduce("good")])
    with pytest.raises(cls, match="^rank 0: shapes differ$") as info:
        bad.handle.wait(0)
    assert type(info.value) is cls
    assert good.handle.wait(0).tolist() == [1.0] * 3  # the next response still runs


def test_stall_warning_names_what_this_rank_has_not_submitted(caplog) -> None:
    p = Parts()
    with caplog.at_level(logging.WARNING, logger="hvdcore"):
        p.d.run_one(Response(kind=STALL_WARNING, set_id=0, names=[], message="stalled: 'x'",
                             per_rank=[(0, ["x", "y"]), (1, ["z"])]))
        p.d.run_one(Response(kind=STALL_WARNING, set_id=0, names=[], message="stalled: 'q'",
                             per_rank=[(1, ["q"])]))
    first, second = caplog.messages
    # the rank that is missing tensors adds where its threads are: here, in this test
    head, _, where = first.partition("\n  Where this rank's threads are instead:\n")
    assert head == "stalled: 'x'\n  This rank (0) has not submitted: x, y", first
    assert "Thread 'MainThread' (most recent call last" in where, where
    assert "in test_stall_warning_names_what_this_rank_has_not_submitted\n" in where, where
    assert second == "stalled: 'q'"


def test_abort_hands_the_error_to_the_engine() -> None:
    p = Parts()
    p.d.run_one(Response(kind=ABORT, set_id=0, names=[], message="stall shutdown",
                         error_type="StallError"))
    assert len(p.aborted) == 1 and type(p.aborted[0]) is errors.StallError
    assert str(p.aborted[0]) == "rank 0: stall shutdown"


def test_join_turns_the_cache_back_on_and_returns_the_last_rank() -> None:
    p = Parts()
    p.cache.insert(_allreduce("a"))
    p.cache.disable()
    req = p.request("join", JOIN)
    p.d.run_one(Response(kind=JOIN, set_id=0, names=["join"], value=3))
    assert req.handle.wait(0) == 3
    assert p.cache.lookup(Meta(0, "a", ALLREDUCE, "float32", (3,), ReduceOp.SUM))[0] == HIT


def test_shutdown_stops_the_run_and_fails_what_is_left() -> None:
    p = Parts()
    left = p.request("left", tensor=np.ones(3, np.float32))
    sd = p.request("__shutdown__", SHUTDOWN)
    later = p.request("later", tensor=np.ones(3, np.float32))
    p.d.run_all([Response(kind=SHUTDOWN, set_id=0, names=["__shutdown__"]),
                 _allreduce("later")])  # (run_all stops after the shutdown)
    assert p.run.stopped and sd.handle.wait(0) is None and not p.d.inflight
    for req in (left, later):
        with pytest.raises(errors.ShutdownError, match="shut down while this request"):
            req.handle.wait(0)
    assert p.backend.calls == []


def test_process_sets_are_added_and_removed_on_every_plane() -> None:
    p = Parts()
    other = FakeBackend(name="other")
    p.d.add_executor("other", Executor(other, 0))
    add = p.request("add", ADD_SET, ranks=(0,))
    p.d.run_one(Response(kind=ADD_SET, set_id=0, names=["add"], ranks=(0,), value=1))
    assert add.handle.wait(0) == 1
    assert p.sets[1].ranks == (0,) and p.sets[1].comm is not None
    assert p.plane.split_calls == [(True, 0)]
    assert p.backend.sets == [("add", 1)] and other.sets[-1] == ("add", 1)
    # a set this rank is not a member of: no communicator
    p.d.run_one(Response(kind=ADD_SET, set_id=0, names=["add2"], ranks=(1, 2), value=2))
    assert p.sets[2].comm is None
    comm = p.sets[1].comm
    rm = p.request("rm", REMOVE_SET, root=1)
    p.d.run_one(Response(kind=REMOVE_SET, set_id=0, names=["rm"], value=1))
    assert rm.handle.wait(0) is True and 1 not in p.sets
    assert p.plane.freed == [comm] and p.backend.sets[-1] == ("remove", 1)
    p.d.run_one(Response(kind=REMOVE_SET, set_id=0, names=["rm2"], value=2))
    assert p.plane.freed == [comm]  # (no communicator to free)


def test_unknown_kinds_are_ignored_and_take_all_forgets_everything(caplog) -> None:
    p = Parts()
    a = p.request("a", tensor=np.ones(3, np.float32))
    with caplog.at_level(logging.WARNING, logger="hvdcore"):
        p.d.run_one(Response(kind="teleport", set_id=0, names=["a"]))
    assert "unknown kind 'teleport'" in caplog.text and not a.handle.done()
    taken = p.d.take_all()
    assert taken == [a] and not p.d.inflight
    assert p.d.claim(Request(Meta(0, "a", ALLREDUCE), None, None, Handle(1, first, "a"), 0))


def test_a_failing_data_call_leaves_the_dispatcher_usable() -> None:
    p = Parts()
    a = p.request("a", tensor=np.ones(3, np.float32))
    p.backend.fail_next(1, RuntimeError("link down"))
    with pytest.raises(RuntimeError, match="link down"):
        p.d.run_one(_allreduce("a"))
    assert not a.handle.done() and not p.d.inflight  # the request left the table
    b = p.request("a", tensor=np.full(3, 5.0, np.float32))  # the name is free again
    p.d.run_one(_allreduce("a"))
    assert b.handle.wait(0).tolist() == [5.0] * 3


def test_a_list_runs_every_response_after_one_raises_and_its_requests_get_the_error(
        caplog) -> None:
    """As on the peers, the responses after a failing one still run; the first error is
    raised after them, and ``fail_interrupted`` hands it to the requests of the call that
    raised (the engine's cycle does, on any thread)."""
    p = Parts()
    a = p.request("a", tensor=np.ones(3, np.float32))
    b = p.request("b", tensor=np.full(3, 2.0, np.float32))
    p.backend.fail_next(1, RuntimeError("link down"))
    with pytest.raises(RuntimeError, match="link down") as raised:
        p.d.run_all([_allreduce("a"), _allreduce("b")])
    assert b.handle.wait(0).tolist() == [2.0] * 3  # ran after a's data call raised
    assert not a.handle.done()
    with caplog.at_level(logging.WARNING, logger="hvdcore"):
        assert p.d.fail_interrupted(raised.value)
    assert "the data call of 'a' failed (RuntimeError: link down)" in caplog.text
    with pytest.raises(RuntimeError, match="link down"):
        a.handle.wait(0)
    assert not p.d.fail_interrupted(RuntimeError("other"))  # nothing kept any more


def test_the_one_error_policy_fails_now_on_a_callers_thread_and_keeps_in_the_cycle() -> None:
    """``data_failed``, the policy every route takes after a data call raised: on a caller's
    thread (``now``) its requests get the error at once and nothing is kept; in the cycle they
    are kept for the engine's step and the error is raised again; an exception that is not an
    ``Exception`` (a KeyboardInterrupt) is always kept and raised."""
    p = Parts()
    a, b, c = p.request("a"), p.request("b"), p.request("c")
    p.d.inflight.clear()  # (a data call's requests have left it)
    p.d.data_failed([a, None], RuntimeError("link down"), True)
    with pytest.raises(RuntimeError, match="link down"):
        a.handle.wait(0)
    assert not p.d.fail_interrupted(RuntimeError("other"))  # nothing kept
    with pytest.raises(RuntimeError, match="late"):
        p.d.data_failed([b], RuntimeError("late"), False)
    assert not b.handle.done()  # kept, for the engine's step
    assert p.d.fail_interrupted(RuntimeError("late"))
    with pytest.raises(RuntimeError, match="late"):
        b.handle.wait(0)
    with pytest.raises(KeyboardInterrupt):
        p.d.data_failed([c], KeyboardInterrupt(), True)
    assert not c.handle.done() and p.d.take_all() == [c]
