"""glibc ``malloc`` thresholds for ranks that no ``hvdcorerun`` started (``srun``, ``mpirun``).

Open MPI's large-message allreduce allocates a scratch buffer of up to the message size in
every call; under glibc's defaults each such buffer is mapped afresh and page-faulted in
(:mod:`hvdcore.runner.allocator_env` tells the whole story). ``hvdcorerun`` fixes that with
``GLIBC_TUNABLES`` before the ranks start; a rank started by another launcher gets the same
two thresholds here, at ``hvdcore.init()``, through ``mallopt`` (glibc's huge pages for mapped
chunks, ``glibc.malloc.hugetlb``, exist only as a tunable, so they stay ``hvdcorerun``'s).

A ``GLIBC_TUNABLES`` in the rank's environment, empty included, means the launcher or the user
chose glibc's settings: hvdcore then changes nothing.
"""

from __future__ import annotations

import ctypes
from collections.abc import Mapping

__all__ = ["MMAP_THRESHOLD", "TRIM_THRESHOLD", "tune_malloc"]

MMAP_THRESHOLD = 128 << 20
"""Requests below this size come from the heap (above Horovod's 64 MiB fusion threshold)."""
TRIM_THRESHOLD = 256 << 20
"""Freed memory the heap keeps before it returns any to the kernel."""

_M_TRIM_THRESHOLD = -1  # glibc's mallopt parameter numbers (malloc.h)
_M_MMAP_THRESHOLD = -3


def tune_malloc(environ: Mapping[str, str]) -> str:
    """Set glibc's mmap and trim thresholds in this process unless ``GLIBC_TUNABLES`` is in
    ``environ``; returns one line saying what was done (for the rank's debug log)."""
    if "GLIBC_TUNABLES" in environ:
        return "glibc malloc: left as GLIBC_TUNABLES sets it"
    libc = _glibc()
    if libc is None:
        return "glibc malloc: not glibc, left alone"
    mallopt = libc.mallopt
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    if not (mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
            and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)):
        return "glibc malloc: mallopt refused the thresholds, left alone"
    return (f"glibc malloc: mmap threshold {MMAP_THRESHOLD >> 20} MiB, trim threshold "
            f"{TRIM_THRESHOLD >> 20} MiB (mallopt; GLIBC_TUNABLES is not set)")


def _glibc() -> ctypes.CDLL | None:
    """This process's C library when it is glibc (it has ``gnu_get_libc_version``); the
    process's own symbols, so no library search (``find_library`` runs ``ldconfig``)."""
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018 (glibc only)
        libc.mallopt  # noqa: B018
    except (OSError, AttributeError):
        return None
    return libc
