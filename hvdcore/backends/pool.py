"""Reused host memory for results handed to callers.

Fresh memory is page-faulted in on first touch, which on a VM costs more than reducing it
(measured here: allocating and filling 16 MiB took ~10 ms, the reduction under 1 ms). A
:class:`ResultPool` hands out 1-d views of a few kept blocks and reuses a block once no view of
it is alive any more: its reference count shows that, and holds for anything that keeps the
NumPy view alive (a NumPy result, or a torch tensor made with ``torch.from_numpy``).
"""

from __future__ import annotations

import mmap
import sys

import numpy as np

__all__ = ["ALIGNMENT", "ResultPool", "aligned_empty"]


class ResultPool:
    """Pooled 1-d NumPy blocks of ``min_bytes`` ... ``max_bytes``; others are fresh arrays.

    At most ``blocks`` blocks per dtype and ``max_total`` bytes in all are kept. When a request
    fits no free block and the pool is full, the smallest free block that is smaller than the
    request gives way to the new one: otherwise a burst of small results (100 separate 64 KiB
    allreduces) would fill the pool for good, and every later large result (a fused group)
    would be fresh memory, page-faulted in on each call.
    """

    def __init__(self, min_bytes: int = 32 << 10, max_bytes: int = 64 << 20,
                 blocks: int = 4, max_total: int = 256 << 20) -> None:
        self.min_bytes = min_bytes
        self.max_bytes = max_bytes
        self.blocks = blocks
        self.max_total = max_total
        self.kept_bytes = 0
        self._pool: dict[np.dtype, list[np.ndarray]] = {}

    def keeps(self, nbytes: int) -> bool:
        """True when results of ``nbytes`` come from kept blocks (else :meth:`take` returns a
        fresh ``np.empty``)."""
        return self.min_bytes <= nbytes <= self.max_bytes

    def take(self, dtype: np.dtype, count: int, like: int = 0) -> np.ndarray:
        """A 1-d array of ``count`` elements of ``dtype`` (contents undefined) that starts
        ``ALIGNMENT + like % ALIGNMENT`` bytes into its block (rounded down to the item size):
        pass an input's address so that the result shares its alignment."""
        nbytes = count * dtype.itemsize
        if not self.keeps(nbytes):
            return np.empty(count, dtype=dtype)
        shift = (ALIGNMENT + like % ALIGNMENT) // dtype.itemsize
        need = count + _SLACK // dtype.itemsize  # every block has room for any shift
        pool = self._pool.setdefault(dtype, [])
        victim, victim_size = -1, need
        for i in range(len(pool)):  # (indexing, not enumerate: no extra reference to a block)
            blk = pool[i]
            # references: the pool's list, ``blk``, getrefcount's argument
            if sys.getrefcount(blk) <= 3:
                if blk.size >= need:
                    return blk[shift:shift + count]
                if blk.size < victim_size:
                    victim, victim_size = i, blk.size
        size = nbytes + _SLACK
        blk = (np.frombuffer(_mapped(size), dtype=dtype) if nbytes >= _MAPPED_FROM
               else aligned_empty(size, dtype))
        if len(pool) < self.blocks and self.kept_bytes + size <= self.max_total:
            pool.append(blk)
            self.kept_bytes += size
        elif victim >= 0 and self.kept_bytes - pool[victim].nbytes + size <= self.max_total:
            self.kept_bytes += size - pool[victim].nbytes
            pool[victim] = blk
        return blk[shift:shift + count]


#: Kept blocks start on a multiple of this many bytes: what TensorFlow's CPU kernels need to
#: use a result's memory as a tensor's (see :mod:`hvdcore.tensorflow.host_arrays`).
ALIGNMENT = 64

#: Room in every kept block: a result starts ALIGNMENT bytes in, plus its input's offset from
#: an ALIGNMENT boundary. Open MPI's 64 MiB Allreduce on the 2-core VM (input 16 bytes past a
#: page) took 63-68 ms into a page-aligned result (a mapped block's start) against 47-52 ms
#: into one 16 bytes past a page; a page-aligned input into a result 16 bytes off was slow
#: too, and 64, 128 or 2048 bytes past a page were fast for every input (no 4 KiB aliasing
#: between the copies' loads and stores, and the input's alignment kept).
_SLACK = 2 * ALIGNMENT


def aligned_empty(nbytes: int, dtype: np.dtype) -> np.ndarray:
    """A 1-d array of ``nbytes`` of heap memory (contents undefined) starting on an ALIGNMENT
    boundary, e.g. ``aligned_empty(4096, np.dtype(np.float32))``.

    Made by ``np.frombuffer`` on a bytearray: its slices then reference the block itself (NumPy
    collapses a view's base only through arrays), so the block's reference count keeps telling
    whether a result still uses it."""
    raw = bytearray(nbytes + ALIGNMENT)
    start = -np.frombuffer(raw, np.uint8, 1).ctypes.data % ALIGNMENT
    return np.frombuffer(raw, dtype=dtype, count=nbytes // dtype.itemsize, offset=start)


#: Blocks from this size on get a mapping of their own (NumPy asks for huge pages from 4 MiB on
#: too); smaller ones measured slower as mappings (1 MiB: 4x raw instead of 1.1x).
_MAPPED_FROM = 4 << 20


def _mapped(nbytes: int) -> mmap.mmap:
    """Anonymous memory of its own for a kept block, with transparent huge pages asked for.

    Not glibc's heap: once a large buffer has been freed (Open MPI frees a temporary one per
    large allreduce), glibc serves later ones from the heap, which gets no huge pages; and not
    a plain mapping either. An MPI result in either measured ~1.5x slower at 16 MiB here than
    in NumPy's own large arrays, which NumPy allocates with ``MADV_HUGEPAGE`` (fewer TLB misses,
    and fewer pages for Open MPI's single-copy path to pin).
    """
    mem = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if hasattr(mmap, "MADV_HUGEPAGE"):
        try:
            mem.madvise(mmap.MADV_HUGEPAGE)
        except OSError:  # kernels without THP: small pages, still correct
            pass
    return mem

