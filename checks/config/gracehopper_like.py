"""Example site config with a Grace-Hopper partition (NVIDIA GH200 superchips, aarch64).

Nodes with 4x GH200 (72 Arm Neoverse V2 cores + 1 H100 each): 4 ranks per node, one per
superchip, CUDA-aware MPI over Slingshot. hvdcore from a venv built for aarch64 (``CHECKS_VENV``, default ``$SCRATCH/hvdcore-gh``)
or from a module.

    reframe -C checks/config/gracehopper_like.py -c checks/ -r --system gh:gh200
"""

import os

from reframe.utility import import_module_from_file

# common.py loaded by path: ReFrame before 4.9 does not put this directory on sys.path while it
# loads a configuration file (checks/README.md, "Imports")
common = import_module_from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                              "common.py"))

site_configuration = {
    "systems": [
        {
            "name": "gh",
            "descr": "A cluster with a Grace-Hopper (GH200) partition",
            "hostnames": [r"gh-login\d+", r"gh\d+"],
            "modules_system": "lmod",
            "partitions": [
                {
                    "name": "gh200",
                    "descr": "4x NVIDIA GH200 (Grace 72c + H100 96GB) per node, aarch64",
                    "scheduler": "slurm",
                    "launcher": "srun",
                    "access": ["--partition=gh200"],
                    "environs": ["hvdcore-venv", "hvdcore-mod"],
                    "max_jobs": 8,
                    "time_limit": "30m",
                    "features": ["gpu", "nvgpu", "mpi", "cuda-aware-mpi"],
                    "env_vars": [["MPICH_GPU_SUPPORT_ENABLED", "1"]],
                    "processor": {"arch": "neoverse_v2", "num_cpus": 288,
                                  "num_cpus_per_socket": 72, "num_sockets": 4},
                    "devices": [{"type": "gpu", "arch": "sm_90", "num_devices": 4}],
                    "resources": common.gpu_resources(),
                    "extras": {
                        "ranks_per_node": 4,
                        "gpus_per_node": 4,
                        # the fabric check: NCCL over aws-ofi-nccl (libfabric CXI), 4 NICs
                        # (CSCS forces NCCL_NET="AWS Libfabric" for the same reason)
                        "nccl_net": "AWS Libfabric",
                        "nics_per_node": 4,
                        "max_nodes": 8,
                        "launcher_options": common.SLURM_MPI,
                        "references": common.recorded_references("gh", "gh200"),
                    },
                }
            ],
        }
    ],
    "environments": [
        common.venv_environment(venv=os.environ.get("CHECKS_VENV", "$SCRATCH/hvdcore-gh"),
                                target_systems=["gh"], frameworks=["torch"], pythonpath=None),
        common.modules_environment("hvdcore-mod", ["cuda/12.4", "hvdcore/0.2.0"],
                                   target_systems=["gh"]),
    ],
    "logging": common.logging_config(),
    "general": common.general_config(),
}
