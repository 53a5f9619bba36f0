"""A generic Slurm system: ``srun --mpi=pmix``, a CPU and a GPU partition, a venv environment.

Adapt it with environment variables instead of editing (all optional):

=============================  ===========================================================
``CHECKS_SLURM_SCHEDULER``     ``squeue`` (default; needs no accounting) or ``slurm`` (sacct)
``CHECKS_SLURM_CPU_PARTITION``  Slurm partition of the CPU nodes (default ``debug``)
``CHECKS_SLURM_GPU_PARTITION``  Slurm partition of the GPU nodes (default ``gpu``)
``CHECKS_SLURM_ACCOUNT``       ``--account`` for every job (default: none)
``CHECKS_SLURM_CPUS_PER_NODE``  ranks per CPU node (default 2)
``CHECKS_SLURM_GPUS_PER_NODE``  GPUs (= ranks) per GPU node (default 4)
``CHECKS_SLURM_MAX_NODES``     largest MNIST scale in nodes (default 2)
``CHECKS_SLURM_ONE_HOST``      ``1`` when the "nodes" share one host (the CI harness):
                               Open MPI then uses TCP on loopback between them
                               (``btl=self,tcp``, ``btl_tcp_if_include=lo``), and
                               every performance variable is reported but not judged (its
                               references are unbounded: the ranks share the host's cores)
``CHECKS_VENV``                venv the jobs activate (default: the one running ReFrame;
                               it must be on a file system the compute nodes see)
=============================  ===========================================================

References (``extras["references"]``) come from ``checks/config/references/generic.json``
(``checks/tools/record_references.py``); none are shipped, so absolute values are reported and
only the checks' ratios are judged until a site records its own.

Run the CPU partition only::

    reframe -C checks/config/slurm.py --system generic:cpu -c checks/ -r
"""

import os

from reframe.utility import import_module_from_file

# common.py loaded by path: ReFrame before 4.9 does not put this directory on sys.path while it
# loads a configuration file (checks/README.md, "Imports")
common = import_module_from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                              "common.py"))

_env = os.environ.get
SCHEDULER = _env("CHECKS_SLURM_SCHEDULER", "squeue")
ACCOUNT = [f"--account={_env('CHECKS_SLURM_ACCOUNT')}"] if _env("CHECKS_SLURM_ACCOUNT") else []
CPUS = int(_env("CHECKS_SLURM_CPUS_PER_NODE", "2"))
GPUS = int(_env("CHECKS_SLURM_GPUS_PER_NODE", "4"))
MAX_NODES = int(_env("CHECKS_SLURM_MAX_NODES", "2"))
ONE_HOST = _env("CHECKS_SLURM_ONE_HOST", "0") == "1"
# Both fake nodes of the CI harness have one hostname: Open MPI's shared memory would then
# connect ranks of different "nodes" and crash, so use TCP (never needed on a real cluster),
# on the loopback interface only (the nodes are one host). A rank that segfaults prints its
# Python stack: the tests tell Open MPI 4.1's rare crash inside MPI_Init by it
# (tests/harness/mpi_init_race.py) and run that job again.
NET_ENV = ([["OMPI_MCA_btl", "self,tcp"], ["OMPI_MCA_btl_tcp_if_include", "lo"],
            ["PYTHONFAULTHANDLER", "1"], ["OMPI_MCA_opal_signal", ""]] if ONE_HOST else [])


def _references(partition: str) -> dict:
    refs = common.recorded_references("generic", partition)
    # Fake nodes share (and oversubscribe) one host's cores: efficiency is reported, not judged.
    return common.unjudged_on_shared_cores(refs) if ONE_HOST else refs


# Fake nodes share the host's cores: one job at a time, or the jobs slow each other down.
MAX_JOBS = 1 if ONE_HOST else 4

site_configuration = {
    "systems": [
        {
            "name": "generic",
            "descr": "A generic Slurm cluster (srun --mpi=pmix)",
            "hostnames": [".*"],
            "modules_system": "nomod",
            "partitions": [
                {
                    "name": "cpu",
                    "descr": "CPU nodes",
                    "scheduler": SCHEDULER,
                    "launcher": "srun",
                    "access": [f"--partition={_env('CHECKS_SLURM_CPU_PARTITION', 'debug')}",
                               *ACCOUNT],
                    "environs": ["hvdcore-venv"],
                    "max_jobs": MAX_JOBS,
                    "features": ["cpu", "mpi"],
                    "env_vars": NET_ENV,
                    "processor": {"num_cpus": CPUS},
                    "resources": common.gpu_resources(),
                    "extras": {
                        "ranks_per_node": CPUS,
                        "gpus_per_node": 0,
                        "max_nodes": MAX_NODES,
                        "launcher_options": common.SLURM_MPI,
                        "references": _references("cpu"),
                    },
                },
                {
                    "name": "gpu",
                    "descr": f"GPU nodes, {GPUS} NVIDIA GPUs each",
                    "scheduler": SCHEDULER,
                    "launcher": "srun",
                    "access": [f"--partition={_env('CHECKS_SLURM_GPU_PARTITION', 'gpu')}",
                               *ACCOUNT],
                    "environs": ["hvdcore-venv"],
                    "max_jobs": MAX_JOBS,
                    "features": ["gpu", "nvgpu", "mpi"],
                    "env_vars": NET_ENV,
                    "devices": [{"type": "gpu", "num_devices": GPUS}],
                    "resources": common.gpu_resources(),
                    "extras": {
                        "ranks_per_node": GPUS,
                        "gpus_per_node": GPUS,
                        "max_nodes": MAX_NODES,
                        "launcher_options": common.SLURM_MPI,
                        "references": _references("gpu"),
                    },
                },
            ],
        }
    ],
    "environments": [
        common.venv_environment(venv=_env("CHECKS_VENV"), target_systems=["generic"]),
    ],
    "logging": common.logging_config(),
    "general": common.general_config(),
}
