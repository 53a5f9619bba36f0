"""Test-side harnesses: real infrastructure the tests start for themselves.

- :mod:`harness.slurm_localhost`: a private Slurm cluster on localhost (munged, slurmctld and
  one slurmd per fake node), used by the Slurm tests, the fault-injection suite and CI.
- :mod:`harness.mpi_init_race`: Open MPI 4.1's rare crash inside ``MPI_Init`` on those fake
  nodes, told apart from any other, and ``run_job``, which runs such a job once more.
- :mod:`harness.mpich_wheel`: a real MPICH (5.0.2, the ``mpich`` wheel from PyPI) in a prefix of
  its own, for hvdcore and hvdcorerun on a second MPI (its Hydra ``mpirun``).

``tests/`` is on the import path of the tests (``pythonpath`` in ``pyproject.toml``), so this
package is imported as ``harness``; ``slurm_localhost.py`` also runs as a command by its path.
"""
