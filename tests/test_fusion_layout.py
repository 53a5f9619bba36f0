"""Fusion-buffer layout: every tensor starts on a 64-byte boundary; fusers count the gaps.

The multi-rank side (fused results are views of one buffer at these offsets, bit-identical to
unfused runs) is checked by ``programs/core_collectives.py`` and, for TensorFlow's zero-copy
results, ``programs/tensorflow_collectives.py``.
"""

from __future__ import annotations

import math

import pytest

from hvdcore.engine.cache import ResponseCache
from hvdcore.engine.fusion import ALIGNMENT, fused_layout, slot_bytes
from hvdcore.engine.messages import ALLREDUCE, Response

SHAPES = [(), (0,), (1,), (7,), (3, 5), (16,), (2, 0, 3), (1000,), (13,)]


@pytest.mark.parametrize("itemsize", [1, 2, 4, 8, 16])
def test_each_tensor_starts_aligned_without_overlap(itemsize: int) -> None:
    layout = fused_layout(SHAPES, itemsize)
    counts = [math.prod(s) for s in SHAPES]
    assert layout.counts == counts
    ends = [off + n for off, n in zip(layout.offsets, counts, strict=True)]
    for i, off in enumerate(layout.offsets):
        assert off * itemsize % ALIGNMENT == 0, (i, off)
        if i:
            assert ends[i - 1] <= off, "tensors must not overlap"
            # the smallest gap that aligns the next tensor
            assert off - ends[i - 1] == layout.gaps[i - 1] < ALIGNMENT // itemsize
    assert layout.gaps[-1] == 0 and layout.total == ends[-1]
    assert layout.padded
    assert layout.total * itemsize <= sum(slot_bytes(n * itemsize) for n in counts)


def test_sizes_in_whole_units_need_no_gaps() -> None:
    layout = fused_layout([(16,), (32,), (5,)], 4)  # 64 and 128 bytes, then the last one
    assert layout.offsets == [0, 16, 48] and layout.gaps == [0, 0, 0] and not layout.padded
    assert layout.total == 53
    assert fused_layout([], 4).total == 0


def test_slot_bytes_rounds_up_to_the_alignment() -> None:
    assert [slot_bytes(n) for n in (0, 1, 63, 64, 65, 4000)] == [0, 64, 64, 64, 128, 4032]


def test_the_threshold_counts_the_gaps() -> None:
    """Two 100-byte tensors take 128 bytes each with their gaps: they fuse under a 256-byte
    threshold, not under 255 (which their 200 bytes alone would fit)."""
    c = ResponseCache(4)
    for name in ("a", "b"):
        c.insert(Response(kind=ALLREDUCE, set_id=0, names=[name], dtype="float32",
                          shapes=[(25,)], op=0))
    assert [r.names for r in c.responses([0, 1], 256)] == [["a", "b"]]
    assert [r.names for r in c.responses([0, 1], 255)] == [["a"], ["b"]]
