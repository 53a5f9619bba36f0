"""What the tests on the 2-node localhost Slurm share: their marks (skipped, with the reason,
where Slurm is missing), the ``cluster`` fixture and the environment jobs across the fake nodes
need.

Use in a test module::

    from harness.slurm_fixtures import FAKE_NODES_ENV, slurm_marks, two_node_cluster  # noqa: F401
    pytestmark = slurm_marks(pytest.mark.torch)
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from harness.mpi_init_race import FAULT_HANDLER_ENV
from harness.slurm_localhost import SlurmCluster, missing_requirements

#: Both fake nodes share this host's name: Open MPI must use TCP between them, and since they
#: are one host, on loopback only (as ``checks/config/slurm.py`` sets it for one host). A rank
#: that segfaults prints its Python stack (``harness.mpi_init_race``).
FAKE_NODES_ENV = {"OMPI_MCA_btl": "self,tcp", "OMPI_MCA_btl_tcp_if_include": "lo",
                  **FAULT_HANDLER_ENV}


def slurm_marks(*extra: pytest.MarkDecorator) -> list[pytest.MarkDecorator]:
    """``slurm`` and ``mpi`` plus ``extra``, and a skip naming what is missing, if anything."""
    marks = [pytest.mark.slurm, pytest.mark.mpi, *extra]
    missing = missing_requirements()
    if missing:
        marks.append(pytest.mark.skip(reason="no local Slurm: missing " + ", ".join(missing)))
    return marks


@pytest.fixture(scope="module", name="cluster")
def two_node_cluster() -> Iterator[SlurmCluster]:
    """munged + slurmctld + slurmd n1, n2 (2 CPUs each), stopped by PID after the module's
    tests."""
    with SlurmCluster(nodes=2, cpus_per_node=2) as c:
        yield c
