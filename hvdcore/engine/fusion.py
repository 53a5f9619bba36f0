"""Where each tensor of a fused allreduce sits in its fusion buffer.

Every tensor starts on an :data:`ALIGNMENT`-byte boundary of the buffer, and fused results
are handed out as views of a pooled buffer that starts on one too (see
:mod:`hvdcore.backends.pool`). So each result is as aligned as a tensor of its own, which is
what lets TensorFlow use it without a copy: its CPU kernels abort on less than 64-byte aligned
memory (see :mod:`hvdcore.tensorflow.host_arrays`). The gap after a tensor is at most
``ALIGNMENT - 1`` bytes; the fusion threshold counts it (:func:`slot_bytes`), so a fused
buffer never exceeds the threshold.

Example::

    >>> layout = fused_layout([(3,), (2, 2)], itemsize=4)
    >>> layout.offsets, layout.total, layout.gaps
    ([0, 16], 20, [13, 0])
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from hvdcore.backends.pool import ALIGNMENT

__all__ = ["ALIGNMENT", "FusedLayout", "fused_layout", "slot_bytes"]


def slot_bytes(nbytes: int) -> int:
    """Bytes a tensor of ``nbytes`` takes in a fusion buffer: itself and the gap after it."""
    return -(-nbytes // ALIGNMENT) * ALIGNMENT


@dataclass(frozen=True, slots=True)
class FusedLayout:
    """Element positions of the tensors of one fused allreduce in its buffer."""

    counts: list[int]  # elements of each tensor
    offsets: list[int]  # element where each tensor starts
    total: int  # elements of the buffer (no gap after the last tensor)
    gaps: list[int]  # elements of padding after each tensor
    padded: bool  # some tensor is followed by a gap


def fused_layout(shapes: Sequence[tuple[int, ...]], itemsize: int) -> FusedLayout:
    """The layout of tensors of ``shapes`` in a buffer of elements of ``itemsize`` bytes
    (a power of two up to ALIGNMENT: every dtype a collective takes)."""
    unit = ALIGNMENT // itemsize
    counts = [math.prod(s) for s in shapes]
    offsets: list[int] = []
    gaps: list[int] = []
    off = 0
    for n in counts:
        offsets.append(off)
        end = off + n
        off = -(-end // unit) * unit
        gaps.append(off - end)
    if gaps:
        gaps[-1] = 0
    total = offsets[-1] + counts[-1] if counts else 0
    return FusedLayout(counts, offsets, total, gaps, any(gaps))
