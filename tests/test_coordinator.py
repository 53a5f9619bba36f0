"""Negotiation logic (pure Python): readiness, agreement, fusion, hold, stall detection."""

from hvdcore.engine.coordinator import Coordinator
from hvdcore.engine.messages import ABORT, ALLREDUCE, ERROR, STALL_WARNING, Meta, ReduceOp


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def make(size: int = 2, threshold: int = 1 << 20, cycle: float = 0.0, clock=None) -> Coordinator:
    return Coordinator(size, {0: tuple(range(size))}, threshold, cycle, 2.0, 5.0,
                       clock=clock or Clock())


def ar(name: str, shape=(4,), dtype="float32", op=ReduceOp.SUM) -> Meta:
    return Meta(0, name, ALLREDUCE, dtype, shape, int(op))


def test_not_ready_until_every_rank_announced() -> None:
    c = make(3)
    c.add(0, [ar("a")])
    c.add(2, [ar("a")])
    assert c.poll() == []
    c.add(1, [ar("a")])
    (resp,) = c.poll()
    assert resp.kind == ALLREDUCE and resp.names == ["a"]
    assert not c.busy()


def test_fusion_groups_by_dtype_and_respects_threshold() -> None:
    c = make(2, threshold=128)
    metas = [ar("a"), ar("b"), ar("c", dtype="float64"), ar("d"), ar("e", shape=(20,))]
    c.add(0, metas)
    c.add(1, metas)
    resps = c.poll()
    # A tensor counts its bytes rounded up to 64 (each starts on a 64-byte boundary): a+b (16
    # bytes each) = 128 fit in 128; d would make 192: new buffer; e (80 bytes: 128) alone; c
    # other dtype
    assert {tuple(r.names) for r in resps} == {("a", "b"), ("c",), ("d",), ("e",)}
    assert next(r for r in resps if r.names == ["c"]).dtype == "float64"


def test_hold_for_cycle_time_while_more_tensors_arrive() -> None:
    clock = Clock()
    c = make(2, cycle=0.001, clock=clock)
    c.add(0, [ar("a"), ar("b")])
    c.add(1, [ar("a")])
    assert c.poll() == []  # a is ready but b is about to be: hold
    clock.t += 0.0005
    c.add(1, [ar("b")])
    (resp,) = c.poll()
    assert resp.names == ["a", "b"]


def test_hold_is_bounded_by_cycle_time() -> None:
    clock = Clock()
    c = make(2, cycle=0.001, clock=clock)
    c.add(0, [ar("a"), ar("b")])
    c.add(1, [ar("a")])
    assert c.poll() == []
    clock.t += 0.002
    (resp,) = c.poll()
    assert resp.names == ["a"]


def test_mismatch_names_both_sides() -> None:
    c = make(2)
    c.add(0, [ar("g", shape=(10, 4))])
    c.add(1, [ar("g", shape=(10, 3))])
    (resp,) = c.poll()
    assert resp.kind == ERROR and resp.error_type == "MismatchError"
    assert "rank 0 submitted [10, 4]; rank 1 submitted [10, 3]" in resp.message


def test_stall_warning_then_abort() -> None:
    clock = Clock()
    c = make(3, clock=clock)
    c.add(0, [ar("x")])
    c.add(1, [ar("x")])
    clock.t = 2.5
    (warn,) = c.poll()
    assert warn.kind == STALL_WARNING and "missing on rank 2" in warn.message
    assert dict(warn.per_rank) == {2: ["x"]}
    clock.t = 3.0
    assert c.poll() == []  # warned once
    clock.t = 5.5
    (abort,) = c.poll()
    assert abort.kind == ABORT and abort.error_type == "StallError"


def test_joined_rank_counts_as_present_for_allreduce() -> None:
    c = make(2)
    c.add(1, [Meta(0, "join", "join")])
    c.add(0, [ar("a")])
    (resp,) = c.poll()
    assert resp.names == ["a"] and resp.joined == (1,)
    c.add(0, [Meta(0, "join", "join")])
    (done,) = c.poll()
    assert done.kind == "join" and done.value == 0


def test_shutdown_stall_warns_but_never_aborts() -> None:
    clock = Clock()
    c = make(2, clock=clock)
    c.add(1, [Meta(0, "__shutdown__", "shutdown")])
    clock.t = 2.5
    (warn,) = c.poll()
    assert warn.kind == STALL_WARNING and "shutdown" in warn.message
    clock.t = 100.0
    assert c.poll() == []


def test_rank_that_submitted_then_joined_is_a_contributor() -> None:
    c = make(2)
    c.add(0, [ar("a")])
    c.add(0, [Meta(0, "join", "join")])
    c.add(1, [ar("a")])
    (resp,) = c.poll()
    assert resp.names == ["a"] and resp.joined == ()


def rejected(name: str, rank: int, etype: str = "ArgumentError") -> Meta:
    return Meta(0, name, ALLREDUCE, error=f"rank {rank}: bad splits", error_type=etype)


def test_rejected_call_fails_every_rank_once_all_announced() -> None:
    """A call that failed its checks on one rank fails on all, naming that rank and reason,
    but only once every member announced the name (else a late peer would wait forever)."""
    c = make(3)
    c.add(0, [rejected("a", 0)])
    c.add(1, [ar("a")])
    assert c.poll() == []
    c.add(2, [ar("a")])
    (resp,) = c.poll()
    assert resp.kind == ERROR and resp.names == ["a"] and resp.error_type == "ArgumentError"
    assert "rejected by rank 0" in resp.message and "bad splits" in resp.message
    assert not c.busy()


def test_call_rejected_on_every_rank_is_never_executed() -> None:
    for size in (1, 2):
        c = make(size)
        for r in range(size):
            c.add(r, [Meta(0, "a", ALLREDUCE, error="bad", error_type="UnsupportedError")])
        (resp,) = c.poll()
        assert resp.kind == ERROR and resp.error_type == "UnsupportedError", resp
