"""The host result pool (hvdcore/backends/pool.py): a kept block is handed out again only once
no view of it is alive, so a result the caller still holds is never overwritten; large blocks
are mappings of their own, small and oversized requests are plain arrays."""

from __future__ import annotations

import numpy as np
import pytest

from hvdcore.backends.pool import ResultPool

F32 = np.dtype(np.float32)
SLACK = 128  # extra bytes of each kept block (pool._SLACK): a result starts 64 + like % 64 in


@pytest.mark.parametrize("nbytes", [64 << 10, 8 << 20], ids=["heap-64KiB", "mapped-8MiB"])
def test_a_block_is_reused_only_after_its_view_is_gone(nbytes: int) -> None:
    pool = ResultPool(min_bytes=32 << 10, max_bytes=16 << 20, blocks=4)
    count = nbytes // 4
    a = pool.take(F32, count)
    a[:] = 1.0
    b = pool.take(F32, count)  # a is alive: another block
    assert not np.shares_memory(a, b)
    b[:] = 2.0
    assert (a == 1.0).all() and (b == 2.0).all()
    addr = a.__array_interface__["data"][0]
    del a
    c = pool.take(F32, count)  # a's block is free again
    assert c.__array_interface__["data"][0] == addr and c.flags.writeable and c.size == count
    c[:] = 3.0
    assert (b == 2.0).all()


def test_a_view_of_a_view_keeps_the_block() -> None:
    pool = ResultPool(blocks=1)
    a = pool.take(F32, 1 << 20).reshape(1024, 1024)[:, :2]
    a[:] = 5.0
    b = pool.take(F32, 1 << 20)
    assert not np.shares_memory(a, b)
    b[:] = 0.0
    assert (a == 5.0).all()


def test_a_torch_tensor_on_a_block_keeps_it() -> None:
    torch = pytest.importorskip("torch")
    pool = ResultPool(blocks=1)
    t = torch.from_numpy(pool.take(F32, 2 << 20))  # 8 MiB: a mapped block
    t.fill_(7.0)
    other = pool.take(F32, 2 << 20)
    other[:] = 0.0
    assert bool((t == 7.0).all())


def test_outside_the_range_and_over_the_block_count_are_fresh_arrays() -> None:
    pool = ResultPool(min_bytes=32 << 10, max_bytes=1 << 20, blocks=1)
    small, big = pool.take(F32, 16), pool.take(F32, (2 << 20) // 4)
    assert small.size == 16 and big.size == (2 << 20) // 4
    kept = pool.take(F32, 1 << 16)
    extra = pool.take(F32, 1 << 16)  # the one block is taken: a fresh array, not pooled
    assert not np.shares_memory(kept, extra)
    del extra
    again = pool.take(F32, 1 << 16)
    assert not np.shares_memory(kept, again)


def test_a_larger_request_replaces_a_free_smaller_block_when_the_pool_is_full() -> None:
    pool = ResultPool(min_bytes=32 << 10, max_bytes=16 << 20, blocks=2)
    small = [pool.take(F32, 1 << 14) for _ in range(2)]  # 64 KiB each: the pool is full
    assert len(pool._pool[F32]) == 2
    del small
    big = pool.take(F32, 1 << 20)  # 4 MiB: fits no block; a free small one gives way
    addr = big.__array_interface__["data"][0]
    del big
    again = pool.take(F32, 1 << 20)
    assert again.__array_interface__["data"][0] == addr
    assert sorted(b.nbytes for b in pool._pool[F32]) == [(64 << 10) + SLACK,
                                                             (4 << 20) + SLACK]


def test_a_block_in_use_is_never_replaced() -> None:
    pool = ResultPool(min_bytes=32 << 10, max_bytes=16 << 20, blocks=1)
    held = pool.take(F32, 1 << 14)
    held[:] = 9.0
    big = pool.take(F32, 1 << 20)  # the one block is in use: big is fresh and not kept
    big[:] = 0.0
    assert (held == 9.0).all() and pool._pool[F32][0].size == (1 << 14) + SLACK // 4


def test_the_total_kept_bytes_are_capped() -> None:
    pool = ResultPool(min_bytes=32 << 10, max_bytes=16 << 20, blocks=4, max_total=8 << 20)
    first = pool.take(F32, (6 << 20) // 4)
    second = pool.take(F32, (6 << 20) // 4)  # would make 12 MiB kept: not pooled
    assert not np.shares_memory(first, second) and pool.kept_bytes == (6 << 20) + SLACK


@pytest.mark.parametrize("nbytes", [32 << 10, 100_004, 1 << 20, 8 << 20])
def test_kept_blocks_start_on_64_byte_boundaries(nbytes: int) -> None:
    # TensorFlow uses a result's memory for its tensor only when aligned like this
    pool = ResultPool(min_bytes=32 << 10, max_bytes=16 << 20, blocks=2)
    for dtype in (F32, np.dtype(np.float64), np.dtype(np.int8)):
        a = pool.take(dtype, nbytes // dtype.itemsize)
        assert a.ctypes.data % 64 == 0 and a.flags.writeable and a.flags.c_contiguous
        assert a.nbytes == nbytes // dtype.itemsize * dtype.itemsize


@pytest.mark.parametrize("nbytes", [64 << 10, 8 << 20], ids=["heap-64KiB", "mapped-8MiB"])
def test_a_result_shares_the_alignment_it_is_asked_for(nbytes: int) -> None:
    """take(..., like=address) starts like % 64 bytes past a 64-byte boundary (an MPI result
    aligned as its input is runs faster), rounded down to the item size, and never on a page
    boundary; the block still serves any shift, and a result never runs past its block."""
    pool = ResultPool(min_bytes=32 << 10, max_bytes=16 << 20, blocks=1)
    for like, dtype, want in ((0, F32, 0), (16, F32, 16), (4096 + 48, F32, 48),
                              (12, np.dtype(np.float64), 8), (63, np.dtype(np.uint8), 63)):
        count = nbytes // dtype.itemsize
        a = pool.take(dtype, count, like)
        assert a.__array_interface__["data"][0] % 64 == want, (like, dtype)
        assert a.size == count and a.flags.writeable
        a[:] = 7  # the whole view is writable memory of the block
        assert (a == 7).all()
        block = a.base.__array_interface__["data"][0]
        a_addr = a.__array_interface__["data"][0]
        del a
        if nbytes >= 4 << 20:  # a mapping of its own: never a result on a page boundary
            assert a_addr % 4096 != 0
        b = pool.take(dtype, count, 0)  # the same block again, at another shift
        assert b.base.__array_interface__["data"][0] == block
        assert b.__array_interface__["data"][0] % 64 == 0
        del b
