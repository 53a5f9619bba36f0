"""Example site config modelled on an HPE Cray EX system with 4x NVIDIA A100 per GPU node.

Perlmutter-like: GPU nodes (1x AMD Milan 64c, 4x A100-40GB, Slingshot) selected with
``--constraint=gpu`` and a ``_g`` account, CPU nodes (2x Milan 64c) with ``--constraint=cpu``,
Slurm with accounting (scheduler ``slurm``), Lmod. hvdcore comes from a site module (environment
``hvdcore-mod``) or from a user venv on $SCRATCH (``hvdcore-venv``). Set ``CHECKS_SITE_ACCOUNT``
to your project (default ``m0000``). Names of modules and QOS are examples: adapt them.

    reframe -C checks/config/perlmutter_like.py -c checks/ -r --system perlmutter:gpu
"""

import os

from reframe.utility import import_module_from_file

# common.py loaded by path: ReFrame before 4.9 does not put this directory on sys.path while it
# loads a configuration file (checks/README.md, "Imports")
common = import_module_from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                              "common.py"))

ACCOUNT = os.environ.get("CHECKS_SITE_ACCOUNT", "m0000")

site_configuration = {
    "systems": [
        {
            "name": "perlmutter",
            "descr": "Perlmutter-like HPE Cray EX: 4x A100 GPU nodes and Milan CPU nodes",
            "hostnames": [r"login\d+", r"nid\d+"],
            "modules_system": "lmod",
            "partitions": [
                {
                    "name": "gpu",
                    "descr": "GPU nodes: 1x AMD EPYC 7763, 4x NVIDIA A100, 4x Slingshot NICs",
                    "scheduler": "slurm",
                    "launcher": "srun",
                    "access": ["--constraint=gpu", "--qos=regular", f"--account={ACCOUNT}_g"],
                    "environs": ["hvdcore-mod", "hvdcore-venv"],
                    "max_jobs": 8,
                    "time_limit": "30m",
                    "features": ["gpu", "nvgpu", "mpi", "cuda-aware-mpi"],
                    "env_vars": [["MPICH_GPU_SUPPORT_ENABLED", "1"]],
                    "processor": {"num_cpus": 128, "num_cpus_per_core": 2,
                                  "num_cpus_per_socket": 128, "num_sockets": 1},
                    "devices": [{"type": "gpu", "arch": "sm_80", "num_devices": 4}],
                    "resources": common.gpu_resources(),
                    "extras": {
                        "ranks_per_node": 4,
                        "gpus_per_node": 4,
                        # the fabric check: NCCL over aws-ofi-nccl (libfabric CXI) on the
                        # node's 4 Slingshot NICs; a TCP-socket fallback fails
                        "nccl_net": "AWS Libfabric",
                        "nics_per_node": 4,
                        # the data-plane check's link: each A100 SXM4's 12 NVLink 3 links,
                        # 25 GB/s each way (busbw / this is reported as a link fraction)
                        "planes_link_GBps": {"device": 300.0},
                        "max_nodes": 16,
                        "launcher_options": common.SLURM_MPI,
                        "references": common.recorded_references("perlmutter", "gpu"),
                    },
                },
                {
                    "name": "cpu",
                    "descr": "CPU nodes: 2x AMD EPYC 7763 (128 cores)",
                    "scheduler": "slurm",
                    "launcher": "srun",
                    "access": ["--constraint=cpu", "--qos=regular", f"--account={ACCOUNT}"],
                    "environs": ["hvdcore-mod", "hvdcore-venv"],
                    "max_jobs": 8,
                    "time_limit": "30m",
                    "features": ["cpu", "mpi"],
                    "processor": {"num_cpus": 256, "num_cpus_per_core": 2,
                                  "num_cpus_per_socket": 128, "num_sockets": 2},
                    "resources": common.gpu_resources(),
                    "extras": {
                        "ranks_per_node": 8,
                        "gpus_per_node": 0,
                        "max_nodes": 16,
                        "launcher_options": common.SLURM_MPI,
                        "references": common.recorded_references("perlmutter", "cpu"),
                    },
                },
            ],
        }
    ],
    "environments": [
        common.modules_environment(
            "hvdcore-mod",
            ["PrgEnv-gnu", "cudatoolkit/12.2", "craype-accel-nvidia80", "hvdcore/0.2.0"],
            target_systems=["perlmutter"],
        ),
        common.venv_environment(venv="$SCRATCH/hvdcore-venv", target_systems=["perlmutter"],
                                frameworks=["torch"], pythonpath=None),
    ],
    "logging": common.logging_config(),
    "general": common.general_config(),
}
