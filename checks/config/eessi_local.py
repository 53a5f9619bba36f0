"""EESSI test-suite configuration of this host: ``checks/eessi/`` (and EESSI's own tests) run here.

Follows the conventions of the ``eessi-testsuite`` package (1.1.0) for a site configuration:
partition ``features`` are the device type (``cpu``) plus every EESSI scale (``SCALES``) the
host can run, ``processor`` gives ``num_cpus`` and ``num_cpus_per_core`` (the mixin places ranks
from them), ``extras`` give ``mem_per_node`` (MiB), logging and ``general`` come from
``eessi.testsuite.common_config``, and ``set_common_required_config`` adds the environments
``EESSI-2023.06`` / ``EESSI-2025.06`` (modules ``EESSI/2023.06`` / ``EESSI/2025.06``), in which
``find_modules`` looks for ``hvdcore``. Those two modules must be on ``$MODULEPATH``: EESSI's
own where ``/cvmfs/software.eessi.io`` is mounted, elsewhere stand-ins that put a stack's
``modules/all`` on the path (``tests/test_eessi_testsuite.py`` writes them).

Local scheduler, ``mpirun`` (Open MPI as root, oversubscription allowed), one job at a time,
``CHECKS_LOCAL_RANKS`` cores (default 2); logs and reports under ``$RFM_PREFIX`` (see PREFIX). Needs ReFrame and ``eessi-testsuite`` in the Python
that runs ReFrame (``checks/eessi/setup_venv.sh``)::

    reframe --config-file checks/config/eessi_local.py -c checks/eessi/hvdcore_eessi.py \\
        --tag CI --tag 2_cores -r
"""

import os

from eessi.testsuite.common_config import (
    common_general_config,
    common_logging_config,
    set_common_required_config,
)
from eessi.testsuite.constants import EXTRAS, FEATURES, SCALES
from reframe.utility import import_module_from_file

# common.py loaded by path: ReFrame before 4.9 does not put this directory on sys.path while it
# loads a configuration file (checks/README.md, "Imports")
common = import_module_from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                              "common.py"))

CPUS = int(os.environ.get("CHECKS_LOCAL_RANKS", "2"))
#: Where logs, perflogs and reports go: ``$RFM_PREFIX``, else ``~/reframe_runs/eessi_local`` (an
#: absolute path: ReFrame loads this file from its own directory, so a relative one would land
#: in the checkout).
PREFIX = os.environ.get("RFM_PREFIX") or os.path.join(os.path.expanduser("~"), "reframe_runs",
                                                       "eessi_local")
#: Memory of this host in MiB, rounded down (the suite's convention: never ask for more).
MEM_PER_NODE = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20


def local_scales(cpus: int) -> list[str]:
    """The EESSI scales one node of ``cpus`` cores can run (a scale is a partition feature)."""
    return [name for name, spec in SCALES.items() if spec["num_nodes"] == 1
            and (spec.get("num_cpus_per_node") or cpus) <= cpus
            and cpus // spec.get("node_part", 1) >= 1]


site_configuration = {
    "systems": [
        {
            "name": "eessi_local",
            "descr": f"This host as an EESSI test-suite system: local scheduler, mpirun, {CPUS} cores",
            "hostnames": [".*"],
            "modules_system": "lmod",
            "partitions": [
                {
                    "name": "cpu",
                    "descr": "Processes launched with mpirun on this host",
                    "scheduler": "local",
                    "launcher": "mpirun",
                    "max_jobs": 1,
                    "features": [FEATURES.CPU, *local_scales(CPUS)],
                    "env_vars": [*common.OMPI_AS_ROOT,
                                 ["OMPI_MCA_btl_vader_single_copy_mechanism", "none"]],
                    "processor": {"num_cpus": CPUS, "num_cpus_per_core": 1},
                    "extras": {EXTRAS.MEM_PER_NODE: MEM_PER_NODE},
                }
            ],
        }
    ],
    "general": [
        {
            **common_general_config(PREFIX),
            "purge_environment": True,
            # hvdcore's rule for every config: no recursive search (the fault check stays out)
            **common.general_config()[0],
        }
    ],
    "logging": common_logging_config(PREFIX),
}

# Environments (EESSI-2023.06, EESSI-2025.06) and the memory resource, as every EESSI site config.
set_common_required_config(site_configuration)
