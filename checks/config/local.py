"""The embedded default: this host, local scheduler, ``mpirun`` with 2 ranks, no batch system.

Run the whole suite here with::

    reframe -C checks/config/local.py -c checks/ -r

The job runs in the Python environment that runs ReFrame (its venv is activated in each job) with
this checkout on PYTHONPATH, so an uninstalled checkout works. As root, Open MPI needs the
``OMPI_ALLOW_RUN_AS_ROOT*`` variables, and ``rmaps_base_oversubscribe`` lets 2 ranks share fewer
cores. ``CHECKS_LOCAL_RANKS`` changes the number of ranks (default 2).
"""

import os

from reframe.utility import import_module_from_file

# common.py loaded by path: ReFrame before 4.9 does not put this directory on sys.path while it
# loads a configuration file (checks/README.md, "Imports")
common = import_module_from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                              "common.py"))

RANKS = int(os.environ.get("CHECKS_LOCAL_RANKS", "2"))

site_configuration = {
    "systems": [
        {
            "name": "local",
            "descr": f"This host: local scheduler, mpirun, {RANKS} ranks",
            "hostnames": [".*"],
            "modules_system": "nomod",
            "partitions": [
                {
                    "name": "default",
                    "descr": "Processes launched with mpirun on this host",
                    "scheduler": "local",
                    "launcher": "mpirun",
                    "environs": ["hvdcore-venv"],
                    "max_jobs": 1,
                    "features": ["cpu", "mpi"],
                    "env_vars": [*common.OMPI_AS_ROOT, ["OMPI_MCA_btl_vader_single_copy_mechanism", "none"]],
                    "processor": {"num_cpus": RANKS},
                    "extras": {
                        "ranks_per_node": RANKS,
                        "gpus_per_node": 0,
                        "max_nodes": 1,
                        # what the fabric check must find: MPI over shared memory, the Gloo
                        # plane on the loopback interface (one host)
                        "mpi_transport": "sm",
                        "gloo_interface": "lo",
                        "launcher_options": [],
                        "references": common.recorded_references("local", "default"),
                    },
                }
            ],
        }
    ],
    "environments": [common.venv_environment(target_systems=["local"])],
    "logging": common.logging_config(),
    "general": common.general_config(),
}
