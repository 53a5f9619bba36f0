"""The steady calls in Python: the same four functions as the compiled module
(``hvdcore/backends/_hotpath.c``), with the same positional parameters and the same returns.

As CPython's ``json`` has a C and a Python encoder behind one signature, a steady call is
either implementation's function bound to one tensor's constants
(:class:`hvdcore.backends.steady_calls.BoundSteady`). Where the compiled module takes MPI
handles, these take transport objects:

- ``rounds``: posts the round, ``rounds.start_round(send, recv)``, a bitwise-or allreduce of
  the uint64 words of ``send`` into ``recv``, returning a request with ``Test()``, and waits
  for it, ``rounds.wait_round(request, seconds)`` (a control plane, or
  :class:`hvdcore.backends.mpi_steady.MPIRounds`);
- ``data``: makes the data call, ``data.allreduce(src, dst, op)`` (in place when ``src is
  dst``).

``dtype`` is the NumPy dtype (unused here: the arrays carry it). The round's header and the rule
that lets the data run are :mod:`hvdcore.backends.round_wire`'s, generated from its table, as
the compiled module's are. No MPI import: the engine's tests run this module on their doubles.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hvdcore.backends.round_wire import DONE, NOT_READY, PENDING, data_may_run, pack_steady

__all__ = ["steady", "steady_batch", "round_only", "batch_data"]


def round_only(rounds: Any, send: bytearray, recv: bytearray, tail: bytes, spin_ns: int,
               lists: int, lists_done: int) -> Any:
    """Write the steady header and ``tail`` into ``send``, post the round and wait for it up to
    ``spin_ns`` (``rounds.wait_round``): DONE (the data may run), NOT_READY (it completed,
    ``recv`` holds a result that does not let it run) or ``(PENDING, request)``."""
    pack_steady(send, tail, lists)
    req = rounds.start_round(send, recv)
    if not req.Test() and not rounds.wait_round(req, spin_ns * 1e-9):
        return PENDING, req
    return DONE if data_may_run(recv, tail, lists_done) else NOT_READY


def steady(rounds: Any, send: bytearray, recv: bytearray, tail: bytes, spin_ns: int, data: Any,
           dtype: Any, op: Any, lists: int, lists_done: int, src: np.ndarray, dst: np.ndarray,
           count: int) -> Any:
    """:func:`round_only`, then, when it lets the data run, the data allreduce of ``src`` into
    ``dst`` (in place when they are the same object)."""
    got = round_only(rounds, send, recv, tail, spin_ns, lists, lists_done)
    if got != DONE:
        return got
    data.allreduce(src, dst, op)
    return DONE


def steady_batch(rounds: Any, send: bytearray, recv: bytearray, tail: bytes, spin_ns: int,
                 data: Any, dtype: Any, op: Any, lists: int, lists_done: int, arrays: Any,
                 places: np.ndarray, gaps: np.ndarray, buf: np.ndarray, count: int, scale: int,
                 post: float) -> Any:
    """:func:`round_only`, then, when it lets the data run, :func:`batch_data`; the arrays are
    untouched unless it returns DONE."""
    got = round_only(rounds, send, recv, tail, spin_ns, lists, lists_done)
    if got != DONE:
        return got
    batch_data(data, dtype, op, arrays, places, gaps, buf, count, scale, post)
    return DONE


def batch_data(data: Any, dtype: Any, op: Any, arrays: Any, places: np.ndarray,
               gaps: np.ndarray, buf: np.ndarray, count: int, scale: int, post: float) -> None:
    """Copy each array into ``buf`` at its place (``places``: int64 rows of byte offset and
    length), zero the ``gaps``, allreduce ``count`` elements of ``buf`` in place and copy each
    array's part back, multiplied by ``post`` unless ``scale`` is 0."""
    size = buf.itemsize
    flat = buf[:count]
    slots = [flat[off // size:(off + nbytes) // size] for off, nbytes in places.tolist()]
    for arr, slot in zip(arrays, slots, strict=True):
        np.copyto(slot, arr.reshape(-1))
    for off, nbytes in gaps.tolist():
        flat[off // size:(off + nbytes) // size] = 0
    data.allreduce(flat, flat, op)
    for arr, slot in zip(arrays, slots, strict=True):
        if scale:  # as the executor's unpacking does it
            np.multiply(slot, post, out=arr.reshape(-1), casting="unsafe")
        else:
            np.copyto(arr.reshape(-1), slot)
