"""Transports behind the engine: one module per transport, all behind :class:`Backend`."""

from hvdcore.backends.base import Backend
from hvdcore.backends.mpi import MPIBackend

__all__ = ["Backend", "MPIBackend"]
