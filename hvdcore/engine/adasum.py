"""Adasum: Horovod's adaptive summation of gradients (``op=Adasum``), on the host plane.

Two gradients ``a`` and ``b`` combine as ``(1 - a.b / 2|a|^2) a + (1 - a.b / 2|b|^2) b``: their
sum when they are orthogonal, their average when they are parallel. N ranks (a power of two)
combine in a binary tree: at level L = 1, 2, 4, ... the group of ranks whose index has bit L
clear (the left) combines with the group whose index has it set (the right), each group
holding the combination of its own members so far. Every tensor of a fused response is
combined on its own (its own dot product and norms).

The arithmetic is Horovod's (``horovod/common/ops/adasum/adasum.h``): dot products and squared
norms accumulated in float64 (a float32 tensor's products rounded to float32 first, as its loop
multiplies in the element type; summed pairwise in blocks where its loop adds in order, so a
coefficient may differ from Horovod's in the last bits of a double); a coefficient of 1 where a
squared norm is below 1e-8; float32 and float64 results computed in float64 and rounded once,
float16 ones with float32 coefficients. Horovod reaches the tree's result by vector halving and
distance doubling; here each level swaps whole vectors with the partner (``rank ^ L``) and both
compute the same combination, so every rank holds the same bits without a final gather. Prescale
and postscale apply before and after, as Horovod's MPI Adasum operation does.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

__all__ = ["combine", "tree_reduce", "is_power_of_two", "allreduce", "swap_on",
           "element_counts", "execute"]

_TINY = 1e-8  # a squared norm below this leaves its vector's coefficient at 1 (Horovod's)


def is_power_of_two(n: int) -> bool:
    """True for 1, 2, 4, 8, ...: the set sizes Adasum runs on (Horovod's restriction)."""
    return n > 0 and n & (n - 1) == 0


_BLOCK = 16384  # elements a pass works on at once: scratch that stays in cache, no page faults


def _dot_norms(a: np.ndarray, b: np.ndarray) -> tuple[float, float, float]:
    # float32: products rounded to float32, sums in float64 (Horovod's loop over T = float);
    # float16 and float64: products and sums in float64
    wide = np.float32 if a.dtype == np.float32 else np.float64
    scratch = np.empty(min(len(a), _BLOCK), wide)
    sums = [0.0, 0.0, 0.0]
    for s in range(0, len(a), _BLOCK):
        x, y = a[s:s + _BLOCK], b[s:s + _BLOCK]
        t = scratch[:len(x)]
        for i, (u, v) in enumerate(((x, y), (x, x), (y, y))):
            np.multiply(u, v, out=t, dtype=wide)
            sums[i] += float(np.add.reduce(t, dtype=np.float64))
    return sums[0], sums[1], sums[2]


def combine(left: np.ndarray, right: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Adasum of two 1-d vectors of one float dtype, in Horovod's arithmetic, into ``out``
    (which may be ``left`` or ``right``; default a new array)."""
    dot, lnorm, rnorm = _dot_norms(left, right)
    lcoef = 1.0 - dot / lnorm * 0.5 if lnorm >= _TINY else 1.0
    rcoef = 1.0 - dot / rnorm * 0.5 if rnorm >= _TINY else 1.0
    if out is None:
        out = np.empty_like(left)
    n = len(left)
    wide = np.empty(min(n, _BLOCK), np.float64)
    other = np.empty(min(n, _BLOCK), np.float64)
    half = left.dtype == np.float16
    narrow = np.empty(min(n, _BLOCK), np.float32) if half else None
    lc, rc = (np.float32(lcoef), np.float64(np.float32(rcoef))) if half else (lcoef, rcoef)
    for s in range(0, n, _BLOCK):
        x, y = left[s:s + _BLOCK], right[s:s + _BLOCK]
        k = len(x)
        t, u = wide[:k], other[:k]
        np.multiply(y, rc, out=u, dtype=np.float64)
        if narrow is not None:  # float32 coefficients: a product, then a fused multiply-add
            v = narrow[:k]
            np.multiply(x, lc, out=v, dtype=np.float32)
            np.add(u, v, out=t)
            v[...] = t
            out[s:s + k] = v
        else:  # float32/float64: computed in float64, rounded once
            np.multiply(x, lc, out=t, dtype=np.float64)
            np.add(t, u, out=t)
            out[s:s + k] = t
    return out


def _combine_parts(left: np.ndarray, right: np.ndarray, counts: Sequence[int],
                   out: np.ndarray | None = None) -> np.ndarray:
    if out is None:
        out = np.empty_like(left)
    start = 0
    for n in counts:
        combine(left[start:start + n], right[start:start + n], out[start:start + n])
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
    one after the other) with every member's, computed in ``buf`` (also returned);
    ``swap(vector, partner)`` sends ``vector`` to member ``partner`` and returns the partner's
    (a collective of the set: each member swaps with its own partner at the same level)."""
    level = 1
    while level < size:
        theirs = swap(buf, index ^ level)
        left, right = (buf, theirs) if index & level == 0 else (theirs, buf)
        _combine_parts(left, right, counts, out=buf)
        level <<= 1
    return buf


def swap_on(backend: Any, pset: Any, received: np.ndarray) -> Callable[[np.ndarray, int],
                                                                       np.ndarray]:
    """``swap`` for :func:`allreduce` over a data plane's ``alltoallv``: the whole vector to
    the partner, nothing to the others, the partner's into ``received`` (reused each level)."""
    size = len(pset.ranks)

    def swap(vector: np.ndarray, partner: int) -> np.ndarray:
        sizes = [0] * size
        sizes[partner] = vector.nbytes
        backend.alltoallv(pset, vector, sizes, received, sizes)
        return received

    return swap


def element_counts(shapes: Sequence[Sequence[int]]) -> list[int]:
    """The element count of each tensor of a fused response."""
    return [math.prod(s) for s in shapes]


def execute(executor: Any, resp: Any, reqs: list[Any], pset: Any) -> None:
    """An Adasum response on ``executor``'s host plane (``Executor.allreduce`` hands it over):
    each tensor combined on its own; a joined rank's zeros (``None`` in ``reqs``) leave the
    others' result as it is."""
    b = executor.backend
    counts = element_counts(resp.shapes)
    buf = np.empty(sum(counts), np.dtype(resp.dtype))
    t0 = executor.timeline.now_us() if executor.timeline else 0.0
    off = 0
    for req, n in zip(reqs, counts, strict=True):
        if req is None:
            buf[off:off + n] = 0
        else:
            b.scale_into(buf[off:off + n], req.tensor.reshape(-1), resp.prescale)
        off += n
    received = executor.fusion_buffer(buf.dtype, len(buf))  # (a host plane: NumPy)
    result = allreduce(buf, counts, pset.index, len(pset.ranks), swap_on(b, pset, received))
    if resp.postscale != 1.0:
        b.scale_into(result, result, resp.postscale)
    executor._span(reqs, resp.names, f"{executor.prefix}_ADASUM_ALLREDUCE", t0,
                   bytes=buf.nbytes, tensors=len(reqs))
    off = 0
    for req, n, shape in zip(reqs, counts, resp.shapes, strict=True):
        if req is not None:
            out = result[off:off + n].reshape(shape)
            if req.out is not None:
                req.out.reshape(-1)[...] = out.reshape(-1)
                out = req.out
            req.handle.set_part(req.part, out)
        off += n
