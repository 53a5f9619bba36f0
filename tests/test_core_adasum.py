"""``op=hvd.Adasum``: Horovod's adaptive summation on the host plane (hvdcore/engine/adasum.py).

The arithmetic in one process against the formula worked by hand; then real jobs: the core at
1, 2, 3 (refused, as Horovod) and 4 ranks on MPI and at 2 on the Gloo controller, the torch
binding (collectives and the Adasum delta optimizer) at 2 and 3 ranks, each against Horovod's tests and the one-process tree (see the programs'
docstrings)."""

from __future__ import annotations

import re
import threading
from pathlib import Path

import numpy as np
import pytest
from conftest import launch, program, run_mpi

from hvdcore import arguments
from hvdcore.engine.adasum import allreduce, combine, is_power_of_two, tree_reduce
from hvdcore.errors import ArgumentError, UnimplementedError


def test_combine_is_the_formula() -> None:
    """a = [1, 0], b = [1, 1]: a.b = 1, |a|^2 = 1, |b|^2 = 2, so 0.5 a + 0.75 b."""
    a, b = np.array([1.0, 0.0]), np.array([1.0, 1.0])
    assert combine(a, b).tolist() == [1.25, 0.75]
    assert combine(b, a).tolist() == [1.25, 0.75]
    # orthogonal: the sum; parallel: the average; a (near) zero vector: the other one
    assert combine(np.array([2.0, 0.0]), np.array([0.0, 3.0])).tolist() == [2.0, 3.0]
    assert combine(np.array([2.0, 4.0]), np.array([1.0, 2.0])).tolist() == [1.5, 3.0]
    # a squared norm under 1e-8 keeps its coefficient at 1 (without that cut-off: 1 - 5e4)
    tiny, big = np.array([3e-5, 4e-5]), np.array([3.0, 4.0])
    want = 1.0 * tiny + (1.0 - float(np.dot(tiny, big)) / 25.0 * 0.5) * big
    assert np.array_equal(combine(tiny, big), want)
    for dtype in (np.float16, np.float32, np.float64):
        got = combine(a.astype(dtype), b.astype(dtype))
        assert got.dtype == dtype and got.tolist() == [1.25, 0.75]


def test_tree_pairs_neighbours_first() -> None:
    """Four vectors: (v0 + v1) + (v2 + v3) in Adasum's sense, per tensor of ``counts``."""
    rng = np.random.default_rng(5)
    vs = [rng.standard_normal(7).astype(np.float32) for _ in range(4)]
    counts = [3, 4]
    want = np.concatenate([combine(combine(vs[0][s], vs[1][s]), combine(vs[2][s], vs[3][s]))
                           for s in (slice(0, 3), slice(3, 7))])
    assert np.array_equal(tree_reduce(vs, counts), want)
    assert not is_power_of_two(3) and is_power_of_two(1) and is_power_of_two(4)
    with pytest.raises(ValueError, match="power-of-two"):
        tree_reduce(vs[:3])


def test_ranks_swapping_with_rank_xor_level_reach_the_tree() -> None:
    """The distributed form, four threads standing in for ranks (a swap = post, then read the
    partner's): every one ends with the tree's bits."""
    rng = np.random.default_rng(6)
    vs = [rng.standard_normal(9) for _ in range(4)]
    counts = [2, 7]
    posted: dict[tuple[int, int], np.ndarray] = {}
    barrier = threading.Barrier(4, timeout=30)
    results: list[np.ndarray | None] = [None] * 4

    def rank(me: int) -> None:
        level = [0]

        def swap(vector: np.ndarray, partner: int) -> np.ndarray:
            posted[(level[0], me)] = vector.copy()
            barrier.wait()
            theirs = posted[(level[0], partner)]
            level[0] += 1
            return theirs

        results[me] = allreduce(vs[me].copy(), counts, me, 4, swap)

    threads = [threading.Thread(target=rank, args=(me,)) for me in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    want = tree_reduce(vs, counts)
    assert all(r is not None and np.array_equal(r, want) for r in results)


def test_limits_are_horovods() -> None:
    """Global set, a power-of-two size (NotImplementedError, as Horovod), float tensors."""
    ok = np.ones(3, np.float32)
    arguments.check_adasum(ok, 0, 4, "allreduce", 0)
    with pytest.raises(UnimplementedError, match="power-of-two") as info:
        arguments.check_adasum(ok, 0, 3, "allreduce", 0)
    assert isinstance(info.value, NotImplementedError)
    with pytest.raises(UnimplementedError, match="global process set"):
        arguments.check_adasum(ok, 2, 2, "allreduce", 0)
    with pytest.raises(ArgumentError, match="float16, float32 or float64"):
        arguments.check_adasum(np.ones(3, np.int64), 0, 2, "allreduce", 0)


def _ok(res, np_: int, marker: str) -> None:
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-6000:]
    counts = re.findall(rf"^{marker} OK (\d+)$", res.stdout, re.MULTILINE)
    assert len(counts) == np_ and all(int(c) > 0 for c in counts), out[-6000:]


@pytest.mark.mpi
@pytest.mark.parametrize("controller,np_", [("mpi", 1), ("mpi", 2), ("mpi", 3), ("mpi", 4),
                                            ("gloo", 2)])
def test_core_adasum_job(controller: str, np_: int) -> None:
    _ok(launch(controller, np_, [program("core_adasum.py")], timeout=180), np_, "ADASUM")


@pytest.mark.mpi
@pytest.mark.parametrize("np_", [2, 3])
def test_torch_adasum_job(np_: int) -> None:
    _ok(run_mpi(np_, [program("torch_adasum.py")], timeout=240), np_, "TORCH ADASUM")


@pytest.mark.mpi
def test_adasum_benchmark_quick_form() -> None:
    """benchmarks/adasum.py at 2 ranks: every peer's row, results compared (no timing)."""
    res = run_mpi(2, [str(Path(__file__).parents[1] / "benchmarks" / "adasum.py"),
                      "--sizes", "4KiB,64KiB", "--reps", "2"], timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    for peer in ("mpi4py Allreduce Sum", "raw Adasum", "hvd.allreduce(x, op=Adasum)"):
        assert len(re.findall(rf"^\| (4KiB|64KiB) \| {re.escape(peer)} \|", res.stdout,
                              re.MULTILINE)) == 2, res.stdout
    assert "results: every Adasum peer equals the tree" in res.stdout, res.stdout
