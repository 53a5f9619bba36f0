"""The hierarchical plane's view of a fused allreduce's tensors (``_Pieces``): element
ranges of the concatenation, read without building it."""

from __future__ import annotations

import numpy as np
import pytest

from hvdcore.backends.hierarchical import _Pieces


@pytest.mark.parametrize("seed", range(5))
def test_ranges_match_the_concatenation(seed: int) -> None:
    rng = np.random.default_rng(seed)
    sizes = [int(s) for s in rng.integers(0, 40, size=int(rng.integers(1, 12)))]
    sizes[int(rng.integers(len(sizes)))] = 0  # empty pieces (none at all is fine too)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in sizes]
    whole = np.concatenate(arrays)
    pieces = _Pieces(arrays)
    for _ in range(200):
        lo = int(rng.integers(0, whole.size + 1))
        hi = int(rng.integers(lo, whole.size + 1))
        views = pieces.views(lo, hi)
        assert all(v.size for v in views), "no empty views"
        got = np.concatenate(views) if views else np.empty(0, np.float32)
        np.testing.assert_array_equal(got, whole[lo:hi])
        dst = np.full(hi - lo, np.nan, np.float32)
        pieces.copy(lo, hi, dst)
        np.testing.assert_array_equal(dst, whole[lo:hi])


def test_views_share_the_pieces_memory() -> None:
    a, b = np.arange(5.0), np.arange(5.0, 9.0)
    views = _Pieces([a, b]).views(3, 7)
    assert [v.base is a or v.base is b for v in views] == [True, True]
    assert [list(v) for v in views] == [[3.0, 4.0], [5.0, 6.0]]
    one = _Pieces([a])
    assert one.views(2, 2) == [] and list(one.views(1, 4)[0]) == [1.0, 2.0, 3.0]
