"""hvdcore.tensorflow.host_arrays against real TensorFlow, in one process.

A DLPack import of a buffer that is not 64-byte aligned aborts the process in the first kernel
that checks, so this runs as a subprocess of its test. Prints HOST-ARRAYS-OK at the end.
"""

from __future__ import annotations

import gc
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from hvdcore.backends.pool import ResultPool  # noqa: E402
from hvdcore.tensorflow.host_arrays import ALIGNMENT, host_view, to_eager  # noqa: E402


def address(a: np.ndarray) -> int:
    return int(a.__array_interface__["data"][0])


def shares(t: tf.Tensor, a: np.ndarray) -> bool:
    return bool(np.shares_memory(host_view(t), a))


def kernels_run_on(t: tf.Tensor, want: np.ndarray) -> None:
    """Kernels that check the buffer's alignment (a misaligned one aborts here)."""
    assert np.array_equal(t.numpy(), want), (t, want)
    if want.ndim == 1 and want.size >= 4 and want.dtype != np.bool_:
        assert np.array_equal(tf.strided_slice(t, [1], [4]).numpy(), want[1:4])
        assert np.array_equal(tf.reverse(t, [0]).numpy(), want[::-1])
    if want.dtype in (np.float32, np.float64) and want.size:
        np.testing.assert_allclose(float(tf.reduce_sum(t)), float(want.sum(dtype=np.float64)),
                                   rtol=1e-5)


# inputs: a read-only view of the tensor's own buffer
t = tf.constant(np.arange(10_000, dtype=np.float32))
v = host_view(t)
assert np.shares_memory(v, np.asarray(t)) and not v.flags.writeable
assert np.array_equal(v, np.arange(10_000, dtype=np.float32))

# results: an aligned, writeable, contiguous array is shared; anything else is copied aligned
pool = ResultPool(min_bytes=32 << 10, max_bytes=64 << 20, blocks=2)
block = pool.take(np.dtype(np.float32), 1 << 16)
block[:] = np.arange(1 << 16, dtype=np.float32)
shared = to_eager(block)
assert shares(shared, block), "an aligned pool block must be shared, not copied"
kernels_run_on(shared, np.arange(1 << 16, dtype=np.float32))

base = np.arange(40_000, dtype=np.float32)
for offset in range(0, 64, 4):  # every 4-byte offset from a 64-byte boundary
    start = (-address(base) % ALIGNMENT + offset) // 4
    view = base[start:start + 30_000]
    t = to_eager(view)
    assert address(host_view(t)) % ALIGNMENT == 0
    assert shares(t, view) == (address(view) % ALIGNMENT == 0), offset
    kernels_run_on(t, view.copy())

frozen = block[:100].copy()
frozen.flags.writeable = False
t = to_eager(frozen)
assert not shares(t, frozen)
kernels_run_on(t, frozen)
strided = np.arange(200, dtype=np.float64)[::2]
kernels_run_on(to_eager(strided), strided.copy())

for arr in (np.array(2.5, np.float32), np.zeros((0, 3), np.float32), np.ones((2, 3)),
            np.array([True, False, True, True, False]), np.arange(9, dtype=np.uint8),
            np.arange(-4, 5, dtype=np.int8), np.ones(7, np.float16), np.arange(6, dtype=np.int32),
            np.arange(5, dtype=np.int64)):
    t = to_eager(arr)
    assert t.dtype.as_numpy_dtype == arr.dtype and tuple(t.shape) == arr.shape, (t, arr)
    kernels_run_on(t, arr)

# lifetime: a tensor on a pool block keeps the block from being handed out again
first = address(block)
del block, shared
gc.collect()
a = pool.take(np.dtype(np.float32), 1 << 16)
assert address(a) == first, "the block is free again once nothing holds it"
a[:] = 7.0
held = to_eager(a)
del a
b = pool.take(np.dtype(np.float32), 1 << 16)
assert address(b) != first, "a block under a live tensor must not be handed out"
b[:] = -1.0
assert float(tf.reduce_min(held)) == 7.0 == float(tf.reduce_max(held))
del held
gc.collect()
c = pool.take(np.dtype(np.float32), 1 << 16)
assert address(c) == first, "the tensor's block is free again once the tensor is gone"

print("HOST-ARRAYS-OK", flush=True)
sys.exit(0)
