"""The steady path's two MPI calls, the cache round and the data allreduce, made as one.

:class:`~hvdcore.engine.pipeline.Pipeline` (its steady host route) runs a blocking allreduce of a
cached host tensor on an idle engine through a :class:`~hvdcore.backends.steady_calls.SteadyCalls`:
post the round with this rank's bits, poll it briefly, and when every rank offered the same tensor,
allreduce the data. :class:`CompiledSteady` makes all of it in one C call without the GIL
(``hvdcore/backends/_hotpath.c``, built when the package is installed where ``mpicc`` is);
:class:`PythonSteady` makes the same MPI calls through mpi4py
(:mod:`hvdcore.backends.steady_python`). Both are
:class:`~hvdcore.backends.steady_calls.BoundSteady` over the same four functions with one signature;
they differ in the transport arguments (MPI handles, or :class:`MPIRounds` and :class:`MPIData`).
Both follow the round's one description, :mod:`hvdcore.backends.round_wire` (the C module through
the header generated from it). They return the same results; the C one costs less at small sizes.

An MPI error raises (mpi4py's ``MPI.Exception``, or the compiled module's ``MPIError``, a
RuntimeError naming the call).
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
from mpi4py import MPI

from hvdcore.backends import hotpath, steady_python
from hvdcore.backends.base import spin_round
from hvdcore.backends.round_wire import DONE, NOT_READY, PENDING
from hvdcore.backends.steady_calls import BoundSteady, ObjectTransport, SteadyCalls

__all__ = ["DONE", "NOT_READY", "PENDING", "SteadyCalls", "CompiledSteady", "PythonSteady",
           "MPIRounds", "MPIData", "make", "compiled_module"]

log = logging.getLogger("hvdcore")


def compiled_module() -> tuple[Any | None, str]:
    """The compiled hot path if it can run in this process, and why not otherwise
    (:func:`hvdcore.backends.hotpath.decide` with mpi4py's MPI library)."""
    return hotpath.decide(MPI.Get_library_version())


class MPIRounds:
    """The round on an mpi4py communicator, for :mod:`~hvdcore.backends.steady_python`."""

    def __init__(self, comm: Any) -> None:
        self.comm = comm

    def start_round(self, send: bytearray, recv: bytearray) -> Any:
        """``MPI_Iallreduce`` with ``MPI_BOR`` of the uint64 words of ``send`` into ``recv``."""
        return self.comm.Iallreduce([send, MPI.UINT64_T], [recv, MPI.UINT64_T], op=MPI.BOR)

    @staticmethod
    def wait_round(request: Any, timeout_s: float) -> bool:
        """Poll the round's MPI request for up to ``timeout_s``."""
        return spin_round(request, timeout_s)


class MPIData:
    """The data call on an mpi4py communicator, for :mod:`~hvdcore.backends.steady_python`."""

    def __init__(self, comm: Any) -> None:
        self.comm = comm

    def allreduce(self, src: np.ndarray, dst: np.ndarray, op: Any) -> None:
        """``MPI_Allreduce`` of ``src`` into ``dst`` (in place when they are one array)."""
        self.comm.Allreduce(MPI.IN_PLACE if src is dst else src, dst, op=op)


class _Handles:
    """The compiled module's transport arguments: MPI handles."""

    def __init__(self, rounds: Any) -> None:
        self.rounds = rounds.handle

    @staticmethod
    def comm(comm: Any) -> Any:
        return comm.handle

    @staticmethod
    def dtype(dtype: np.dtype) -> Any:
        try:
            return MPI.Datatype.fromcode(dtype.char).handle
        except (KeyError, ValueError):
            return None

    @staticmethod
    def op(op: Any) -> Any:
        return op.handle

    @staticmethod
    def pending(token: Any) -> Any:
        return MPI.Request.fromhandle(token)


class CompiledSteady(BoundSteady):
    """The steady calls in C (``hvdcore.backends._hotpath``): one call, no GIL."""

    compiled = True

    def __init__(self, rounds: Any, spin_s: float, module: Any) -> None:
        super().__init__(module, _Handles(rounds), spin_s)


class PythonSteady(BoundSteady):
    """The steady calls through mpi4py (when the compiled module is not there)."""

    def __init__(self, rounds: Any, spin_s: float) -> None:
        super().__init__(steady_python, ObjectTransport(MPIRounds(rounds), MPIData), spin_s)


def make(rounds: Any, spin_s: float, compiled: bool) -> SteadyCalls:
    """The steady calls for cache rounds on ``rounds``: the compiled ones when ``compiled``
    is asked for (``HVDCORE_HOTPATH``) and can run here, else mpi4py's."""
    if compiled:
        module, why = compiled_module()
        if module is not None:
            return CompiledSteady(rounds, spin_s, module)
        log.debug("hvdcore: compiled hot path not used: %s", why)
    return PythonSteady(rounds, spin_s)
