"""Adasum: Horovod's adaptive summation of gradients (``op=Adasum``), on the host plane.

Two gradients ``a`` and ``b`` combine as ``(1 - a.b / 2|a|^2) a + (1 - a.b / 2|b|^2) b``: their
sum when they are orthogonal, their average when they are parallel. N ranks (a power of two)
combine in a binary tree: at level L = 1, 2, 4, ... the group of ranks whose index has bit L
clear (the left) combines with the group whose index has it set (the right), each group
holding the combination of its own members so far. Every tensor of a fused response is
combined on its own (its own dot product and norms).

The arithmetic is Horovod's (``horovod/common/ops/adasum/adasum.h``): dot products and squared
norms accumulated in float64 (a float32 tensor's products rounded to float32 first, as its
loop multiplies in the element type); a coefficient of 1 where a squared norm is below 1e-8;
float32 and float64 results computed in float64 and rounded once, float16 ones with float32
coefficients. Horovod reaches the tree's result by vector halving and distance doubling; here
each level swaps whole vectors with the partner (``rank ^ L``) and both compute the same
combination, so every rank holds the same bits without a final gather. Prescale and postscale
apply before and after, as Horovod's MPI Adasum operation does.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

__all__ = ["combine", "tree_reduce", "is_power_of_two", "allreduce", "swap_on",
           "element_counts"]

_TINY = 1e-8  # a squared norm below this leaves its vector's coefficient at 1 (Horovod's)


def is_power_of_two(n: int) -> bool:
    """True for 1, 2, 4, 8, ...: the set sizes Adasum runs on (Horovod's restriction)."""
    return n > 0 and n & (n - 1) == 0


def _dot_norms(a: np.ndarray, b: np.ndarray) -> tuple[float, float, float]:
    if a.dtype == np.float32:  # float products, float64 sums (Horovod's loop over T = float)
        return (float(np.sum(a * b, dtype=np.float64)), float(np.sum(a * a, dtype=np.float64)),
                float(np.sum(b * b, dtype=np.float64)))
    a64, b64 = a.astype(np.float64, copy=False), b.astype(np.float64, copy=False)
    return float(np.dot(a64, b64)), float(np.dot(a64, a64)), float(np.dot(b64, b64))


def combine(left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """Adasum of two 1-d vectors of one float dtype, in Horovod's arithmetic (a new array)."""
    dot, lnorm, rnorm = _dot_norms(left, right)
    lcoef = 1.0 - dot / lnorm * 0.5 if lnorm >= _TINY else 1.0
    rcoef = 1.0 - dot / rnorm * 0.5 if rnorm >= _TINY else 1.0
    if left.dtype == np.float16:  # float32 coefficients, a product then a fused multiply-add
        lc, rc = np.float32(lcoef), np.float32(rcoef)
        scaled = (lc * left.astype(np.float32)).astype(np.float64)
        return (scaled + np.float64(rc) * right.astype(np.float64)).astype(
            np.float32).astype(np.float16)
    mixed = lcoef * left.astype(np.float64) + rcoef * right.astype(np.float64)
    return mixed.astype(left.dtype)


def _combine_parts(left: np.ndarray, right: np.ndarray, counts: Sequence[int]) -> np.ndarray:
    out = np.empty_like(left)
    start = 0
    for n in counts:
        out[start:start + n] = combine(left[start:start + n], right[start:start + n])
        start += n
    return out


def tree_reduce(vectors: Sequence[np.ndarray], counts: Sequence[int] | None = None) -> np.ndarray:
    """The Adasum of every rank's 1-d vector (``vectors[i]``: rank i's), in one process: the
    reference the distributed result equals bit for bit. ``counts`` splits the vectors into
    tensors combined on their own (default: one tensor)."""
    if not is_power_of_two(len(vectors)):
        raise ValueError(f"Adasum needs a power-of-two number of vectors, got {len(vectors)}")
    parts = list(counts) if counts is not None else [len(vectors[0])]
    level = list(vectors)
    while len(level) > 1:
        level = [_combine_parts(level[i], level[i + 1], parts) for i in range(0, len(level), 2)]
    return level[0].copy()


def allreduce(buf: np.ndarray, counts: Sequence[int], index: int, size: int,
              swap: Callable[[np.ndarray, int], np.ndarray]) -> np.ndarray:
    """This rank's (``index`` of ``size``) Adasum of ``buf`` (1-d, the tensors of ``counts``
    one after the other) with every member's; ``swap(vector, partner)`` sends ``vector`` to
    member ``partner`` and returns the partner's (a collective of the set: each member swaps
    with its own partner at the same level)."""
    mine = buf
    level = 1
    while level < size:
        theirs = swap(mine, index ^ level)
        left, right = (mine, theirs) if index & level == 0 else (theirs, mine)
        mine = _combine_parts(left, right, counts)
        level <<= 1
    return mine


def swap_on(backend: Any, pset: Any) -> Callable[[np.ndarray, int], np.ndarray]:
    """``swap`` for :func:`allreduce` over a data plane's ``alltoallv``: the whole vector to
    the partner, nothing to the others."""
    size = len(pset.ranks)

    def swap(vector: np.ndarray, partner: int) -> np.ndarray:
        sizes = [0] * size
        sizes[partner] = vector.nbytes
        got = np.empty_like(vector)
        backend.alltoallv(pset, vector, sizes, got, sizes)
        return got

    return swap


def element_counts(shapes: Sequence[Sequence[int]]) -> list[int]:
    """The element count of each tensor of a fused response."""
    return [math.prod(s) for s in shapes]
