"""``hvdcore/engine/pipeline.py`` and ``steady_batch.py``: the routes a caller runs itself on
an idle engine (a round of its own, then the data call; or both as one steady call), through
the real engine in this process, against both steady implementations (one signature, the
``steady_impl`` fixture): the Python one (``hvdcore/backends/steady_python.py``) over one rank's
doubles (``engine_doubles.SteadyPlane``, the data plane a NumPy backend whose allreduce is one
direct call, ``DirectBackend``, as MPI's is), and the compiled one on MPI's ``COMM_SELF``
(``tests/steady_self.py``).

Every test asserts results and errors, never which shortcut ran. The same shortcuts on real
ranks (compiled and mpi4py steady calls): ``tests/test_steady_path.py``,
``tests/test_steady_batch.py``.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from engine_doubles import DirectBackend, FakeBackend, SteadyPlane, load_config, world
from steady_self import CompiledSteadyPlane, SelfBackend, compiled_or_skip

from hvdcore.backends.base import DeviceBuffer
from hvdcore.engine import requests
from hvdcore.engine.handle import first
from hvdcore.engine.loop import Engine
from hvdcore.engine.messages import ALLREDUCE, SHUTDOWN, Meta, ReduceOp

_CALLS = 6  # enough repeats for the first call, the round-alone call and the steady calls


def _meta(name: str, dtype: str = "float32", shape: tuple[int, ...] = (3,),
          op: int = ReduceOp.SUM, **kw: object) -> Meta:
    return Meta(0, name, ALLREDUCE, dtype, shape, op, **kw)


@pytest.fixture(params=["python", "compiled"])
def steady_impl(request: pytest.FixtureRequest) -> str:
    """Which steady calls the engine gets: the Python implementation
    (``hvdcore/backends/steady_python.py``) on the doubles, or the compiled module on MPI's
    COMM_SELF in this process (``tests/steady_self.py``); one signature, the same tests."""
    return request.param


@pytest.fixture(params=["caller", "thread"])
def job(request: pytest.FixtureRequest, steady_impl: str
        ) -> Iterator[tuple[Engine, DirectBackend]]:
    if steady_impl == "compiled":
        module = compiled_or_skip()
        backend: DirectBackend = SelfBackend()
        plane: SteadyPlane = CompiledSteadyPlane(backend, module)  # type: ignore[arg-type]
    else:
        backend = DirectBackend()
        plane = SteadyPlane(backend)
    engine = Engine(plane, load_config(), backend, {0: world(1)},
                    caller_progress=request.param == "caller")
    yield engine, backend
    if engine.fatal is None and engine.alive:
        engine.drive(requests.submit_control(engine, SHUTDOWN, "__shutdown__"))
    engine.stop(10)
    assert not engine.alive
    if steady_impl == "compiled":
        plane.release()  # type: ignore[attr-defined]
        backend.release()  # type: ignore[attr-defined]


def _no_fault_in_c(steady_impl: str) -> None:
    """Skip a compiled variant whose check makes a host steady data call fail on purpose: the
    doubles fail it in the Python implementation's data call, and the compiled module makes
    that MPI call itself (its MPI errors: ``tests/test_steady_path.py`` on real ranks)."""
    if steady_impl == "compiled":
        pytest.skip("the compiled module's own MPI_Allreduce cannot be made to fail in-process")


def test_repeated_blocking_calls_give_each_its_result(job) -> None:
    engine, _ = job
    meta = _meta("w", postscale=2.0)
    out = np.empty(3, np.float32)
    for step in range(_CALLS):
        x = np.full(3, step, np.float32)
        got = requests.allreduce(engine, meta, x, None)
        assert got.tolist() == [2.0 * step] * 3 and x.tolist() == [step] * 3
        assert requests.allreduce(engine, meta, x, out) is out
        assert out.tolist() == [2.0 * step] * 3
        inplace = np.full(3, step, np.float32)
        assert requests.allreduce(engine, meta, inplace, inplace) is inplace
        assert inplace.tolist() == [2.0 * step] * 3


def test_async_steady_start_and_averages(job) -> None:
    engine, _ = job
    meta = _meta("avg", "float64", (2, 2), ReduceOp.AVERAGE, postscale=3.0)
    for step in range(_CALLS):
        h = requests.allreduce_async(engine, meta, np.full((2, 2), step, np.float64), None)
        assert requests.wait(engine, h).tolist() == [[3.0 * step] * 2] * 2


def test_a_failing_steady_data_call_raises_and_the_engine_goes_on(job, steady_impl) -> None:
    _no_fault_in_c(steady_impl)
    engine, backend = job
    meta = _meta("w")
    for _ in range(_CALLS):
        requests.allreduce(engine, meta, np.ones(3, np.float32), None)
    backend.fail_next(1, RuntimeError("link down"))
    with pytest.raises(RuntimeError, match="link down"):
        requests.allreduce(engine, meta, np.ones(3, np.float32), None)
    assert requests.allreduce(engine, meta, np.full(3, 4, np.float32), None).tolist() == [4] * 3
    backend.fail_next(1, RuntimeError("link down"))  # a queued call's data call this time
    h = requests.submit(engine, [(meta, np.ones(3, np.float32), None)], first, "w")
    with pytest.raises(RuntimeError, match="link down"):
        requests.wait(engine, h)
    h = requests.submit(engine, [(meta, np.full(3, 6, np.float32), None)], first, "w")
    assert requests.wait(engine, h).tolist() == [6] * 3  # the name is free again
    # a new tensor goes through the coordinator: the lists and rounds still run in order
    fresh = requests.allreduce(engine, _meta("new"), np.full(3, 5, np.float32), None)
    assert fresh.tolist() == [5] * 3


def test_an_async_calls_data_error_is_raised_by_synchronize_on_every_route(job,
                                                                         steady_impl) -> None:
    """Horovod raises a failed collective's error from ``synchronize``, not from the call that
    started it: so does every route of the pipeline (the steady call an async call may take at
    once included), and the engine goes on."""
    _no_fault_in_c(steady_impl)
    engine, backend = job
    meta = _meta("a")
    for step in range(_CALLS):
        h = requests.allreduce_async(engine, meta, np.full(3, step, np.float32), None)
        assert requests.wait(engine, h).tolist() == [step] * 3
    for _ in range(2):
        backend.fail_next(1, RuntimeError("link down"))
        h = requests.allreduce_async(engine, meta, np.ones(3, np.float32), None)
        with pytest.raises(RuntimeError, match="link down"):
            requests.wait(engine, h)
        h = requests.allreduce_async(engine, meta, np.full(3, 9, np.float32), None)
        assert requests.wait(engine, h).tolist() == [9] * 3


def test_a_plane_that_stops_taking_the_direct_call_gets_the_general_path(job) -> None:
    engine, backend = job
    meta = _meta("w", postscale=0.5)
    for step in range(_CALLS):
        if step == 3:
            backend.direct, backend.routes = False, backend.routes + 1
        got = requests.allreduce(engine, meta, np.full(3, 2 * step, np.float32), None)
        assert got.tolist() == [step] * 3


def _queued_pair(engine: Engine, x: float) -> tuple:
    """Two queued allreduces of different dtypes (two responses of one round), each its own
    handle: the handles."""
    a, b = _meta("a", "float32"), _meta("b", "float64")
    ha = requests.submit(engine, [(a, np.full(3, x, np.float32), None)], first, "a")
    hb = requests.submit(engine, [(b, np.full(3, x, np.float64), None)], first, "b")
    return ha, hb


def _queued_pairs_give(engine: Engine, *values: float) -> None:
    """Queued pairs of ``values`` (cached from the first) each give their sums."""
    for x in values:
        ha, hb = _queued_pair(engine, x)
        assert requests.wait(engine, ha).tolist() == [x] * 3
        assert requests.wait(engine, hb).tolist() == [x] * 3


def test_queued_calls_each_get_their_own_error_or_result(job) -> None:
    engine, backend = job
    _queued_pairs_give(engine, 0, 1, 2)
    ha, hb = _queued_pair(engine, 7)
    backend.fail_next(1, RuntimeError("link down"))  # the first response's data call
    with pytest.raises(RuntimeError, match="link down"):
        requests.wait(engine, ha)
    assert requests.wait(engine, hb).tolist() == [7] * 3  # the round's other response ran
    _queued_pairs_give(engine, 8)


def test_a_failed_round_fails_every_request_the_caller_took_from_the_queue(job) -> None:
    """The queued route takes the whole queue when it holds the awaited handle's requests: a
    round that raises (the control plane failed) fails every one of them with the error, not
    only the awaited one (the others' waiters would wait forever), and the engine goes on."""
    engine, _ = job
    if not engine.progress.caller_progress:
        pytest.skip("with thread progress the engine thread may take the queue first: a round "
                    "that raises in its cycle is fatal to the engine (test_engine_rounds)")
    _queued_pairs_give(engine, 0, 1, 2)
    ha, hb = _queued_pair(engine, 7)
    engine.plane.round_failures.append(RuntimeError("peer gone"))
    with pytest.raises(RuntimeError, match="peer gone"):
        requests.wait(engine, ha)
    assert hb.done()  # (checked before waiting: a lost request would hang the wait)
    with pytest.raises(RuntimeError, match="peer gone"):
        requests.wait(engine, hb)
    _queued_pairs_give(engine, 8)


def test_steady_batches_reduce_in_place_with_the_average_factor(job, steady_impl) -> None:
    engine, backend = job
    metas = [_meta(f"g{i}", "float32", (i + 1,), ReduceOp.AVERAGE, postscale=4.0)
             for i in range(3)]
    for step in range(_CALLS):
        arrays = [np.full(i + 1, step + i, np.float32) for i in range(3)]
        h = requests.batch_steady(engine, metas, arrays, "batch")
        if h is None:  # not cached yet: the queued route, as the API layer would
            h = requests.submit(engine, [(m, x, x) for m, x in zip(metas, arrays, strict=True)],
                                list, "batch")
        got = requests.wait(engine, h)
        assert [g.tolist() for g in got] == [[4.0 * (step + i)] * (i + 1) for i in range(3)]
        assert all(g is x for g, x in zip(got, arrays, strict=True))
    if steady_impl == "compiled":
        return  # (the rest fails a data call on purpose: see _no_fault_in_c)
    arrays = [np.ones(i + 1, np.float32) for i in range(3)]
    backend.fail_next(1, RuntimeError("link down"))
    with pytest.raises(RuntimeError, match="link down"):
        h = requests.batch_steady(engine, metas, arrays, "batch")
        if h is not None:
            requests.wait(engine, h)
    arrays = [np.ones(i + 1, np.float32) for i in range(3)]
    h = requests.batch_steady(engine, metas, arrays, "batch") or requests.submit(
        engine, [(m, x, x) for m, x in zip(metas, arrays, strict=True)], list, "batch")
    assert [g.tolist() for g in requests.wait(engine, h)] == [[4.0] * (i + 1) for i in range(3)]


def test_a_data_planes_cached_tensor_takes_the_same_route(job) -> None:
    engine, _ = job
    plane = FakeBackend(name="dev")
    engine.register_backend("dev", plane)
    meta = _meta("t", postscale=2.0, device="dev")

    def buf(x: np.ndarray) -> DeviceBuffer:
        return DeviceBuffer(x, "dev", np.dtype(np.float32), (3,), x.ctypes.data)

    for step in range(_CALLS):
        got = requests.allreduce(engine, meta, buf(np.full(3, step, np.float32)), None)
        assert got.tolist() == [2.0 * step] * 3
        h = requests.allreduce_async(engine, meta, buf(np.full(3, step, np.float32)), None)
        assert requests.wait(engine, h).tolist() == [2.0 * step] * 3
    plane.fail_next(1, RuntimeError("device lost"))
    h = requests.allreduce_async(engine, meta, buf(np.ones(3, np.float32)), None)
    with pytest.raises(RuntimeError, match="device lost"):
        requests.wait(engine, h)
    got = requests.allreduce(engine, meta, buf(np.full(3, 3, np.float32)), None)
    assert got.tolist() == [6.0] * 3
    plane.fail_next(1, RuntimeError("device lost"))  # a blocking call's data call this time
    with pytest.raises(RuntimeError, match="device lost"):
        requests.allreduce(engine, meta, buf(np.ones(3, np.float32)), None)
    x = np.full(3, 4, np.float32)
    assert requests.allreduce(engine, meta, buf(x), buf(x)) is x and x.tolist() == [8.0] * 3
    assert {c[0] for c in plane.calls} == {"allreduce"}  # every call ran on its own plane
