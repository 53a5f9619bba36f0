"""The compiled steady calls (``hvdcore/backends/_hotpath.c``) in the test's own process, for
the engine's in-process steady tests (``tests/test_engine_steady.py``): the rounds and the host
data calls on MPI's ``COMM_SELF`` (a one-rank job; importing mpi4py initialises MPI here, as
``tests/test_round_wire.py``'s import of ``mpi_steady`` already does in a test worker).

The Python steady calls run on the doubles themselves (``engine_doubles.SteadyPlane``); here the
same plane and data-plane doubles get the compiled module's calls instead. On one rank the
allreduce is a copy, as it is on the doubles, so every test asserts the same results.
"""

from __future__ import annotations

from typing import Any

from engine_doubles import DirectBackend, SteadyPlane


def compiled_or_skip() -> Any:
    """The compiled module, or skip the calling test with the runtime's reason."""
    import pytest

    pytest.importorskip("mpi4py", reason="no mpi4py (an install without MPI)")
    from hvdcore.backends import mpi_steady  # (initialises MPI: a singleton)

    module, why = mpi_steady.compiled_module()
    if module is None:
        pytest.skip(f"compiled hot path not usable here: {why}; the Python variant runs")
    return module


class SelfBackend(DirectBackend):
    """A :class:`~engine_doubles.DirectBackend` whose direct call is ``MPI_Allreduce`` on a
    duplicate of ``COMM_SELF`` (what the compiled steady call makes itself)."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        from mpi4py import MPI

        self.comm = MPI.COMM_SELF.Dup()
        self.mpi_ops = {"sum": MPI.SUM, "min": MPI.MIN, "max": MPI.MAX, "prod": MPI.PROD}

    def direct_allreduce(self, pset: Any, nbytes: int) -> tuple[Any, dict[str, Any]] | None:
        return (self.comm, self.mpi_ops) if self.direct else None

    def release(self) -> None:
        """Free the communicator (after the engine stopped)."""
        self.comm.Free()


class CompiledSteadyPlane(SteadyPlane):
    """:class:`~engine_doubles.SteadyPlane` with the compiled steady calls: their rounds on a
    duplicate of ``COMM_SELF``, the plane's own rounds (the engine's general path) as before."""

    def __init__(self, backend: SelfBackend, module: Any) -> None:
        super().__init__(backend)
        self.module = module
        self.rounds_comm: Any = None

    def steady_calls(self, spin_s: float, compiled: bool) -> Any:
        from mpi4py import MPI

        from hvdcore.backends import mpi_steady

        self.rounds_comm = MPI.COMM_SELF.Dup()
        return mpi_steady.CompiledSteady(self.rounds_comm, spin_s, self.module)

    def release(self) -> None:
        """Free the round communicator (after the engine stopped)."""
        if self.rounds_comm is not None:
            self.rounds_comm.Free()
            self.rounds_comm = None
