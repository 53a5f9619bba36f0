"""``hvdcore/engine/executor.py``: fusion-buffer packing, the backend call and unpacking, on an
in-process data plane (``engine_doubles.FakeBackend``: every other rank of the set holds the
same tensor unless told otherwise). No MPI."""

from __future__ import annotations

import json

import numpy as np
import pytest
from engine_doubles import FakeBackend, world

from hvdcore.engine.executor import (
    Executor,
    Request,
    backend_op,
    first,
    neutral,
    one_request,
    postscale,
    reduce_dtype,
)
from hvdcore.engine.handle import Handle
from hvdcore.engine.messages import (
    ALLGATHER,
    ALLREDUCE,
    ALLTOALL,
    BARRIER,
    BROADCAST,
    REDUCESCATTER,
    Meta,
    ReduceOp,
    Response,
)
from hvdcore.engine.timeline import Timeline


def _resp(names: list[str], shapes: list[tuple[int, ...]], dtype: str = "float32",
          op: int = ReduceOp.SUM, **kw: object) -> Response:
    return Response(kind=ALLREDUCE, set_id=0, names=names, dtype=dtype, shapes=shapes, op=op,
                    **kw)


def _reqs(arrays: list[np.ndarray | None], outs: list[np.ndarray | None] | None = None
          ) -> tuple[Handle, list[Request | None]]:
    """One handle for all the arrays (``None``: this rank has no tensor, a joined rank)."""
    present = [a for a in arrays if a is not None]
    handle = Handle(len(present), list, "test")
    reqs: list[Request | None] = []
    part = 0
    for i, a in enumerate(arrays):
        if a is None:
            reqs.append(None)
            continue
        out = outs[i] if outs else None
        reqs.append(Request(Meta(0, f"t{i}", ALLREDUCE), a, out, handle, part))
        part += 1
    return handle, reqs


# -- the reduce plan --------------------------------------------------------------------------

def test_reduce_plan_pieces() -> None:
    mpi_like, half_ok = FakeBackend(), FakeBackend(reduces_float16=True)
    assert reduce_dtype(np.dtype(np.float16), mpi_like) == np.float32
    assert reduce_dtype(np.dtype(np.float16), half_ok) == np.float16
    assert reduce_dtype(np.dtype(np.bool_), half_ok) == np.uint8
    assert reduce_dtype(np.dtype(np.int32), mpi_like) == np.int32
    assert backend_op(ReduceOp.AVERAGE, np.dtype(np.float32)) == "sum"
    assert backend_op(ReduceOp.PRODUCT, np.dtype(np.int64)) == "prod"
    # bool: or for sum/max, and for min/product
    assert [backend_op(op, np.dtype(np.bool_)) for op in
            (ReduceOp.SUM, ReduceOp.MAX, ReduceOp.MIN, ReduceOp.PRODUCT)] == [
        "max", "max", "min", "min"]
    assert neutral(ReduceOp.SUM, np.dtype(np.float32)) == 0
    assert neutral(ReduceOp.PRODUCT, np.dtype(np.int8)) == 1
    assert neutral(ReduceOp.MIN, np.dtype(np.float64)) == np.inf
    assert neutral(ReduceOp.MAX, np.dtype(np.int16)) == np.iinfo(np.int16).min
    assert neutral(ReduceOp.MIN, np.dtype(np.uint8)) == 255
    assert neutral(ReduceOp.MIN, np.dtype(np.bool_)) is True
    assert postscale(_resp(["a"], [(1,)], op=ReduceOp.AVERAGE, postscale=3.0), world(4)) == 0.75
    assert postscale(_resp(["a"], [(1,)], postscale=3.0), world(4)) == 3.0


# -- one tensor -------------------------------------------------------------------------------

@pytest.mark.parametrize(("op", "expect"), [
    (ReduceOp.SUM, lambda x: 3 * x), (ReduceOp.AVERAGE, lambda x: x),
    (ReduceOp.MIN, lambda x: x), (ReduceOp.MAX, lambda x: x),
    (ReduceOp.PRODUCT, lambda x: x ** 3)])
def test_one_tensor_each_op_at_three_ranks(op: int, expect) -> None:
    ex = Executor(FakeBackend(), 0)
    x = np.arange(1, 7, dtype=np.float64).reshape(2, 3)
    req = one_request(Meta(0, "x", ALLREDUCE, "float64", (2, 3), op), x, None)
    ex.allreduce(_resp(["x"], [(2, 3)], "float64", op), [req], world(3))
    got = req.handle.wait()
    assert got.shape == (2, 3) and got.dtype == np.float64
    np.testing.assert_allclose(got, expect(x))
    np.testing.assert_array_equal(x, np.arange(1, 7).reshape(2, 3))  # input untouched


def test_out_array_receives_the_result_in_place_too() -> None:
    ex = Executor(FakeBackend(), 0)
    x = np.full(5, 2.0, np.float32)
    out = np.zeros(5, np.float32)
    req = one_request(Meta(0, "x", ALLREDUCE), x, out)
    ex.allreduce(_resp(["x"], [(5,)]), [req], world(2))
    assert req.handle.wait() is out and (out == 4.0).all()
    req = one_request(Meta(0, "x", ALLREDUCE), x, x)  # in place
    ex.allreduce(_resp(["x"], [(5,)], op=ReduceOp.AVERAGE, postscale=0.5), [req], world(2))
    assert req.handle.wait() is x and (x == 1.0).all()


def test_prescale_and_postscale() -> None:
    ex = Executor(FakeBackend(), 0)
    x = np.array([1.0, -2.0, 4.0], np.float32)
    req = one_request(Meta(0, "x", ALLREDUCE), x, None)
    ex.allreduce(_resp(["x"], [(3,)], prescale=2.0, postscale=0.25), [req], world(2))
    np.testing.assert_allclose(req.handle.wait(), x * 2.0 * 2 * 0.25)


@pytest.mark.parametrize("native", [False, True], ids=["float32-buffer", "float16-native"])
def test_float16_is_reduced_in_the_dtype_the_backend_supports(native: bool) -> None:
    backend = FakeBackend(reduces_float16=native)
    ex = Executor(backend, 0)
    # 60000 * 2 overflows float16: only a float32 reduction keeps it before the average
    x = np.array([60000.0, 1.5, -3.0], np.float16)
    req = one_request(Meta(0, "h", ALLREDUCE), x, None)
    ex.allreduce(_resp(["h"], [(3,)], "float16", ReduceOp.AVERAGE), [req], world(2))
    got = req.handle.wait()
    assert got.dtype == np.float16
    assert backend.calls == [("allreduce", "float16" if native else "float32", "sum")]
    if native:
        assert np.isinf(got[0])
    else:
        np.testing.assert_array_equal(got, x)


@pytest.mark.parametrize(("op", "peer", "expect"), [
    (ReduceOp.SUM, True, [True, True, True]),  # logical or with a rank of all True
    (ReduceOp.MAX, False, [True, False, True]),
    (ReduceOp.MIN, True, [True, False, True]),  # logical and with all True: unchanged
    (ReduceOp.PRODUCT, False, [False, False, False]),
])
def test_bool_reductions_are_logical(op: int, peer: bool, expect: list[bool]) -> None:
    ex = Executor(FakeBackend(peer=lambda b: np.full_like(b, peer)), 0)
    x = np.array([True, False, True])
    req = one_request(Meta(0, "b", ALLREDUCE), x, None)
    ex.allreduce(_resp(["b"], [(3,)], "bool", op, postscale=5.0), [req], world(2))
    got = req.handle.wait()
    assert got.dtype == np.bool_ and got.tolist() == expect


# -- fused ------------------------------------------------------------------------------------

@pytest.mark.parametrize("with_out", [False, True], ids=["views", "out-arrays"])
def test_fused_tensors_of_odd_sizes_each_get_their_result(with_out: bool) -> None:
    ex = Executor(FakeBackend(), 0)
    shapes = [(3,), (2, 5), (17,), (), (0,)]  # sizes that leave gaps between 64-byte slots
    xs = [np.arange(int(np.prod(s)), dtype=np.float32).reshape(s) + 10 * i
          for i, s in enumerate(shapes)]
    outs = [np.full(s, np.nan, np.float32) for s in shapes] if with_out else None
    handle, reqs = _reqs(xs, outs)
    resp = _resp([f"t{i}" for i in range(len(shapes))], shapes, op=ReduceOp.AVERAGE,
                 postscale=2.0)
    ex.allreduce(resp, reqs, world(4))
    got = handle.wait()
    for i, (x, g) in enumerate(zip(xs, got, strict=True)):
        assert g.shape == x.shape and g.dtype == np.float32, i
        np.testing.assert_allclose(g, 2.0 * x)
        if with_out:
            assert g is outs[i]  # type: ignore[index]


def test_a_fused_response_runs_again_with_new_tensors() -> None:
    """A cached response is executed step after step with that step's tensors."""
    ex = Executor(FakeBackend(), 0)
    resp = _resp(["a", "b"], [(3,), (4,)])
    for step in range(3):
        a, b = np.full(3, step, np.int64), np.arange(4, dtype=np.int64) * step
        handle, reqs = _reqs([a, b])
        ex.allreduce(resp, reqs, world(2))
        ra, rb = handle.wait()
        assert ra.tolist() == [2 * step] * 3 and rb.tolist() == (2 * b).tolist()


@pytest.mark.parametrize("op", [ReduceOp.SUM, ReduceOp.MIN, ReduceOp.MAX, ReduceOp.PRODUCT])
def test_joined_slots_get_the_neutral_value(op: int) -> None:
    """A tensor this rank does not have (it joined) contributes the op's neutral value; the
    peers here contribute the same, so the joined slot's result is that neutral value and the
    present tensors' results are unaffected."""
    seen: list[np.ndarray] = []

    def peer(buf: np.ndarray) -> np.ndarray:
        seen.append(buf.copy())
        return buf.copy()

    ex = Executor(FakeBackend(peer=peer), 0)
    a, c = np.array([1.0, 2.0]), np.array([3.0])
    handle, reqs = _reqs([a, None, c])
    ex.allreduce(_resp(["a", "b", "c"], [(2,), (3,), (1,)], "float64", op), reqs, world(2))
    ra, rc = handle.wait()
    f = {ReduceOp.SUM: lambda v: 2 * v, ReduceOp.PRODUCT: lambda v: v * v}.get(op, lambda v: v)
    np.testing.assert_allclose(ra, f(a))
    np.testing.assert_allclose(rc, f(c))
    joined_slot = seen[0][8:11]  # the second tensor starts on the 64-byte boundary (8 float64)
    assert (joined_slot == neutral(op, np.dtype(np.float64))).all()


def test_fused_float16_and_prescale_are_converted_per_tensor() -> None:
    ex = Executor(FakeBackend(), 0)
    a = np.array([1.0, 2.0, 3.0], np.float16)
    b = np.array([0.5], np.float16)
    handle, reqs = _reqs([a, b])
    ex.allreduce(_resp(["a", "b"], [(3,), (1,)], "float16", ReduceOp.SUM, prescale=4.0),
                 reqs, world(2))
    ra, rb = handle.wait()
    assert ra.dtype == rb.dtype == np.float16
    np.testing.assert_array_equal(ra, a * 8)
    np.testing.assert_array_equal(rb, b * 8)


# -- errors leave the executor usable ---------------------------------------------------------

def test_a_failed_backend_call_leaves_the_executor_usable() -> None:
    backend = FakeBackend()
    ex = Executor(backend, 0)
    backend.fail_next(1, RuntimeError("link down"))
    handle, reqs = _reqs([np.ones(3, np.float32), np.ones(5, np.float32)])
    resp = _resp(["t0", "t1"], [(3,), (5,)])
    with pytest.raises(RuntimeError, match="link down"):
        ex.allreduce(resp, reqs, world(2))
    assert not handle.done()
    handle, reqs = _reqs([np.full(3, 2.0, np.float32), np.full(5, 3.0, np.float32)])
    ex.allreduce(resp, reqs, world(2))  # the same (cached) response, fresh tensors
    r0, r1 = handle.wait()
    assert r0.tolist() == [4.0] * 3 and r1.tolist() == [6.0] * 5


def test_a_tensor_that_does_not_fit_its_response_fails_alone() -> None:
    ex = Executor(FakeBackend(), 0)
    handle, reqs = _reqs([np.ones(4, np.float32), np.ones(2, np.float32)])
    with pytest.raises(ValueError):  # the response says (3,) for a tensor of 4 elements
        ex.allreduce(_resp(["t0", "t1"], [(3,), (2,)], prescale=2.0), reqs, world(1))
    handle, reqs = _reqs([np.ones(3, np.float32), np.ones(2, np.float32)])
    ex.allreduce(_resp(["t0", "t1"], [(3,), (2,)], prescale=2.0), reqs, world(1))
    assert [r.tolist() for r in handle.wait()] == [[2.0] * 3, [2.0] * 2]


# -- the blocking fast path's single call -----------------------------------------------------

def test_allreduce_single_applies_only_once_the_plan_exists_and_nothing_converts() -> None:
    ex = Executor(FakeBackend(), 0)
    x = np.arange(4, dtype=np.float32)
    avg = _resp(["x"], [(4,)], op=ReduceOp.AVERAGE)
    assert ex.direct_plan(avg, world(2)) is None  # the general path has not run float32/avg
    assert ex.allreduce_single(avg, x, None, world(2)) is None
    req = one_request(Meta(0, "x", ALLREDUCE), x, None)
    ex.allreduce(avg, [req], world(2))
    assert ex.direct_plan(avg, world(2)) == (np.dtype(np.float32), "sum", 0.5)
    np.testing.assert_array_equal(ex.allreduce_single(avg, x, None, world(2)), x)
    out = np.empty(4, np.float32)
    assert ex.allreduce_single(avg, x, out, world(2)) is out
    np.testing.assert_array_equal(out, x)
    # what needs the general path: a prescale, joined ranks, float16, bool, a timeline
    assert ex.allreduce_single(_resp(["x"], [(4,)], op=ReduceOp.AVERAGE, prescale=2.0),
                               x, None, world(2)) is None
    assert ex.allreduce_single(_resp(["x"], [(4,)], op=ReduceOp.AVERAGE, joined=(1,)),
                               x, None, world(2)) is None
    for dtype in ("float16", "bool"):
        arr = np.ones(4, dtype)
        r = one_request(Meta(0, "y", ALLREDUCE), arr, None)
        ex.allreduce(_resp(["y"], [(4,)], dtype), [r], world(2))
        assert ex.allreduce_single(_resp(["y"], [(4,)], dtype), arr, None, world(2)) is None


# -- other collectives ------------------------------------------------------------------------

def _one(kind: str, meta_kw: dict, tensor: np.ndarray, out: np.ndarray | None = None
         ) -> Request:
    return Request(Meta(0, "c", kind, **meta_kw), tensor, out, Handle(1, first, kind), 0)


@pytest.mark.parametrize("shape", [(3, 2), (3, 0), ()], ids=["rows", "empty-rows", "scalar"])
def test_allgather_concatenates_every_ranks_rows(shape: tuple[int, ...]) -> None:
    ex = Executor(FakeBackend(), 0)
    x = np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape)
    rows = shape[0] if shape else 1
    req = _one(ALLGATHER, {}, x)
    resp = Response(kind=ALLGATHER, set_id=0, names=["c"], dtype="int32", shapes=[shape],
                    per_rank=[[rows, rows]])
    ex.allgather(resp, req, world(2))
    got = req.handle.wait()
    assert got.shape == (2 * rows, *shape[1:])
    np.testing.assert_array_equal(got, np.concatenate([x.reshape(rows, *shape[1:])] * 2))


@pytest.mark.parametrize("root_index", [0, 1], ids=["root", "receiver"])
def test_broadcast_root_keeps_its_input_and_receivers_get_roots(root_index: int) -> None:
    ex = Executor(FakeBackend(broadcast_value=7), 0)
    x = np.arange(4, dtype=np.int64)
    req = _one(BROADCAST, {}, x)
    resp = Response(kind=BROADCAST, set_id=0, names=["c"], dtype="int64", shapes=[(4,)],
                    root=root_index)
    ex.broadcast(resp, req, world(2))
    got = req.handle.wait()
    assert got is not x and x.tolist() == [0, 1, 2, 3]
    assert got.tolist() == ([0, 1, 2, 3] if root_index == 0 else [7] * 4)


def test_alltoall_at_one_rank_returns_the_tensor_and_its_splits() -> None:
    ex = Executor(FakeBackend(), 0)
    x = np.arange(6, dtype=np.float32).reshape(3, 2)
    req = _one(ALLTOALL, {}, x)
    resp = Response(kind=ALLTOALL, set_id=0, names=["c"], dtype="float32", shapes=[(3, 2)],
                    per_rank=[[[3]]])
    ex.alltoall(resp, req, world(1))
    out, splits = req.handle.wait()
    np.testing.assert_array_equal(out, x)
    assert splits.dtype == np.int32 and splits.tolist() == [3]


@pytest.mark.parametrize(("index", "rows"), [(0, [0, 1, 2]), (1, [3, 4])])
def test_reducescatter_gives_each_rank_its_block(index: int, rows: list[int]) -> None:
    ex = Executor(FakeBackend(), 0)
    x = np.arange(10, dtype=np.float64).reshape(5, 2)
    req = _one(REDUCESCATTER, {}, x)
    resp = Response(kind=REDUCESCATTER, set_id=0, names=["c"], dtype="float64",
                    shapes=[(5, 2)], op=ReduceOp.AVERAGE, prescale=3.0)
    ex.reducescatter(resp, req, world(2, index))
    got = req.handle.wait()
    np.testing.assert_allclose(got, 3.0 * x[rows])


def test_barrier_completes_with_none() -> None:
    backend = FakeBackend()
    ex = Executor(backend, 0)
    req = _one(BARRIER, {}, None)  # type: ignore[arg-type]
    ex.barrier(Response(kind=BARRIER, set_id=0, names=["c"]), req, world(3))
    assert req.handle.wait() is None and backend.calls == [("barrier", "uint8", "")]


# -- timeline ---------------------------------------------------------------------------------

def test_timeline_spans_are_named_after_the_backend(tmp_path) -> None:
    ex = Executor(FakeBackend(name="fake"), 0)
    tl = ex.timeline = Timeline(str(tmp_path / "tl.json"), 0)
    handle, reqs = _reqs([np.ones(3, np.float32), np.ones(2, np.float32)])
    ex.allreduce(_resp(["t0", "t1"], [(3,), (2,)]), reqs, world(2))
    assert [r.tolist() for r in handle.wait()] == [[2.0] * 3, [2.0] * 2]
    x = np.ones(2, np.float32)
    assert ex.allreduce_single(_resp(["t0"], [(2,)]), x, None, world(2)) is None
    tl.close()
    events = json.loads((tmp_path / "tl.json").read_text())
    phases = {e["name"] for e in events if e.get("ph") == "X"}
    assert {"NEGOTIATE", "FAKE_ALLREDUCE", "UNFUSE"} <= phases
    rows = {e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert rows == {"t0", "t1"}
