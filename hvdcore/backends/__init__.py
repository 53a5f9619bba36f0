"""Transports behind the engine: one module per transport, all behind ``base.Backend``.

``mpi`` (mpi4py) is imported by ``hvdcore.init()``, not here, so importing hvdcore never
initializes MPI.
"""
