"""The memory-allocator settings ``hvdcorerun`` gives every rank.

Two allocators decide how fast MPI moves a training step's large buffers on a host:

- PyTorch's CPU allocator (:data:`TORCH_THP`): transparent huge pages for torch tensors.
- glibc's ``malloc`` (:data:`GLIBC_TUNABLES`): where MPI's own temporary buffers come from.
  Open MPI's large-message allreduce allocates a scratch buffer of up to the message size in
  every call and frees it at the end; glibc maps a request above its mmap threshold afresh
  each time, so every such call page-faults its scratch buffer in, 4 KiB at a time. The
  threshold starts at 128 KiB and follows the largest mapped chunk freed so far, up to 32 MiB:
  whether a call faults depends on what the process freed before (an autotuned run's 32 MiB
  test point made the rest of the run faster than a run given the kept values), and a 64 MiB
  fused allreduce (Horovod's default fusion threshold) faults on every call.

The launcher environment's own value of either variable wins (an empty ``GLIBC_TUNABLES``
turns glibc's part off); ``benchmarks/malloc_tunables.py`` measures both.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["TORCH_THP", "GLIBC_TUNABLES", "GLIBC_DEFAULT", "allocator_exports"]

TORCH_THP = "THP_MEM_ALLOC_ENABLE"
"""PyTorch's switch (2.3 and later, read when torch starts) for transparent huge pages in its
CPU allocator: with it, allocations of 2 MiB and more are ``madvise(MADV_HUGEPAGE)``. Where the
kernel's THP mode is ``madvise`` (Debian's and Ubuntu's default), torch tensors otherwise sit on
4 KiB pages while NumPy's large arrays get huge ones: on the 2-core VM an in-place 16 MiB MPI
allreduce of a torch tensor took 1.14-1.16x the time of the same call on NumPy memory, and
``hvd.allreduce_(t)`` 1.21-1.27x, against 0.98-1.04x and 1.06-1.08x with the switch on."""

GLIBC_TUNABLES = "GLIBC_TUNABLES"
"""glibc's settings variable (2.26 and later; unknown names are ignored, older glibc ignores
it all)."""

# the thresholds of hvdcore.malloc_tuning, written out: the launcher imports no runtime module
# (tests/test_import_layers.py); tests/test_malloc_tuning.py checks that the two agree
GLIBC_DEFAULT = ("glibc.malloc.hugetlb=1:glibc.malloc.mmap_threshold=134217728:"
                 "glibc.malloc.trim_threshold=268435456")
"""What ranks get unless the launcher environment sets ``GLIBC_TUNABLES``: requests below
128 MiB come from the heap, which keeps up to 256 MiB of freed memory at its top instead of
returning it (so a recurring scratch buffer is faulted in once, whatever the process freed
before), and memory glibc does map (larger requests, the heap's growth) is marked for
transparent huge pages (``hugetlb=1``, glibc 2.35 and later): one fault per 2 MiB instead of
per 4 KiB. The cost: up to 256 MiB of freed memory per rank stays resident, and memory freed
inside the heap is reused, not returned, until the process ends. Not covered: a thread's own
arena (hvdcore's engine thread) has heaps of at most 64 MiB, so larger requests there are
still mapped (on huge pages)."""


def allocator_exports(environ: Mapping[str, str]) -> dict[str, str]:
    """``THP_MEM_ALLOC_ENABLE`` and ``GLIBC_TUNABLES`` for every rank: the launcher
    environment's value of each when it sets one (``THP_MEM_ALLOC_ENABLE=0`` or an empty
    ``GLIBC_TUNABLES`` turns that part off), else ``1`` and :data:`GLIBC_DEFAULT`. Always on
    the command line: Open MPI does not forward a variable to remote hosts unless named."""
    return {TORCH_THP: environ.get(TORCH_THP, "1"),
            GLIBC_TUNABLES: environ.get(GLIBC_TUNABLES, GLIBC_DEFAULT)}
