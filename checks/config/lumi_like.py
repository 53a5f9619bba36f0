"""Example site config modelled on an HPE Cray EX system with AMD MI250X GPUs (ROCm).

LUMI-like: ``standard-g`` nodes have 4x MI250X = 8 GPU dies (GCDs), each a GPU to the software,
so 8 ranks per node; RCCL (reported as ``nccl``) over the Slingshot NICs (``NCCL_SOCKET_IFNAME``);
``standard`` CPU nodes (2x 64-core Milan). Every job needs ``--account=project_<id>``
(``CHECKS_SITE_ACCOUNT``, default ``project_465000000``). Software stack ``LUMI/23.09
partition/G`` with an EasyBuild-installed hvdcore module.

    reframe -C checks/config/lumi_like.py -c checks/ -r --system lumi:gpu
"""

import os

from reframe.utility import import_module_from_file

# common.py loaded by path: ReFrame before 4.9 does not put this directory on sys.path while it
# loads a configuration file (checks/README.md, "Imports")
common = import_module_from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                              "common.py"))

ACCOUNT = os.environ.get("CHECKS_SITE_ACCOUNT", "project_465000000")

site_configuration = {
    "systems": [
        {
            "name": "lumi",
            "descr": "LUMI-like HPE Cray EX with AMD MI250X (ROCm) GPU nodes",
            "hostnames": [r"uan\d+", r"nid\d+"],
            "modules_system": "lmod",
            "partitions": [
                {
                    "name": "gpu",
                    "descr": "standard-g: 1x AMD EPYC Trento 64c, 4x MI250X (8 GCDs)",
                    "scheduler": "slurm",
                    "launcher": "srun",
                    "access": ["--partition=standard-g", f"--account={ACCOUNT}"],
                    "environs": ["hvdcore-mod"],
                    "max_jobs": 8,
                    "time_limit": "30m",
                    "features": ["gpu", "amdgpu", "mpi"],
                    "env_vars": [
                        ["NCCL_SOCKET_IFNAME", "hsn0,hsn1,hsn2,hsn3"],
                        ["NCCL_NET_GDR_LEVEL", "3"],
                        ["MIOPEN_USER_DB_PATH", "/tmp/$USER-miopen-cache-$SLURM_JOB_ID"],
                        ["MIOPEN_CUSTOM_CACHE_DIR", "/tmp/$USER-miopen-cache-$SLURM_JOB_ID"],
                    ],
                    "processor": {"num_cpus": 128, "num_cpus_per_core": 2,
                                  "num_cpus_per_socket": 128, "num_sockets": 1},
                    "devices": [{"type": "gpu", "arch": "gfx90a", "num_devices": 8}],
                    "resources": common.gpu_resources(),
                    "extras": {
                        "ranks_per_node": 8,
                        "gpus_per_node": 8,
                        # the fabric check: RCCL over aws-ofi-rccl (libfabric CXI) on the
                        # node's 4 Slingshot NICs; a TCP-socket fallback fails
                        "nccl_net": "AWS Libfabric",
                        "nics_per_node": 4,
                        "max_nodes": 16,
                        "launcher_options": common.SLURM_MPI,
                        "references": common.recorded_references("lumi", "gpu"),
                    },
                },
                {
                    "name": "cpu",
                    "descr": "standard: 2x AMD EPYC Milan 64c",
                    "scheduler": "slurm",
                    "launcher": "srun",
                    "access": ["--partition=standard", f"--account={ACCOUNT}"],
                    "environs": ["hvdcore-mod"],
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
                        "references": common.recorded_references("lumi", "cpu"),
                    },
                },
            ],
        }
    ],
    "environments": [
        common.modules_environment(
            "hvdcore-mod",
            ["LUMI/23.09", "partition/G", "hvdcore/0.2.0-cpeGNU-23.09-rocm-5.6.1"],
            target_systems=["lumi"],
        ),
    ],
    "logging": common.logging_config(),
    "general": common.general_config(),
}
