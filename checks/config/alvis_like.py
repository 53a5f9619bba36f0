"""Example site config modelled on a GPU-only Slurm cluster whose job filter needs a GPU request.

Alvis-like: every job must ask for GPUs of a named type (``--gpus-per-node=A100:4``), otherwise the
site's ``job_submit`` filter rejects it; nodes with 4x A100, 4x A40 and 4x V100; an account per
project (``CHECKS_SITE_ACCOUNT``, default ``NAISS2024-0-000``); software as Lmod modules
(EasyBuild foss/2023a) with hvdcore discovered EESSI-style (environment ``hvdcore-find``), or
an explicit module (``hvdcore-mod``). User guide job scripts: examples/slurm/alvis_jobsubmit.sh.

    reframe -C checks/config/alvis_like.py -c checks/ -r --system alvis:a100
"""

import os

from reframe.utility import import_module_from_file

# common.py loaded by path: ReFrame before 4.9 does not put this directory on sys.path while it
# loads a configuration file (checks/README.md, "Imports")
common = import_module_from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                              "common.py"))

ACCOUNT = os.environ.get("CHECKS_SITE_ACCOUNT", "NAISS2024-0-000")


def _gpu_partition(gpu: str, arch: str, cpus: int, max_nodes: int) -> dict:
    return {
        "name": gpu.lower(),
        "descr": f"Nodes with 4x NVIDIA {gpu}",
        "scheduler": "slurm",
        "launcher": "srun",
        "access": ["--partition=alvis", f"--account={ACCOUNT}"],
        "environs": ["hvdcore-mod", "hvdcore-find"],
        "max_jobs": 8,
        "time_limit": "30m",
        "features": ["gpu", "nvgpu", "mpi"],
        "processor": {"num_cpus": cpus},
        "devices": [{"type": "gpu", "arch": arch, "num_devices": 4}],
        # The job filter needs the GPU type in every request, even 1 GPU for the capability check.
        "resources": common.gpu_resources(f"--gpus-per-node={gpu}:{{num_gpus_per_node}}"),
        "extras": {
            "ranks_per_node": 4,
            "gpus_per_node": 4,
            # the fabric check: NCCL over InfiniBand verbs, never TCP sockets
            "nccl_net": "IB",
            "max_nodes": max_nodes,
            "launcher_options": common.SLURM_MPI,
            "gpu_always": True,
            "references": common.recorded_references("alvis", gpu.lower()),
        },
    }


site_configuration = {
    "systems": [
        {
            "name": "alvis",
            "descr": "Alvis-like GPU cluster (jobs must request typed GPUs)",
            "hostnames": [r"alvis\d*-?\w*", r"alvis[\d-]+"],
            "modules_system": "lmod",
            "partitions": [
                _gpu_partition("A100", "sm_80", 64, 8),
                _gpu_partition("A40", "sm_86", 64, 8),
                _gpu_partition("V100", "sm_70", 32, 4),
            ],
        }
    ],
    "environments": [
        common.modules_environment(
            "hvdcore-mod",
            ["PyTorch/2.1.2-foss-2023a-CUDA-12.1.1", "hvdcore/0.2.0-foss-2023a-CUDA-12.1.1"],
            target_systems=["alvis"],
        ),
        common.modules_environment(
            "hvdcore-find", ["CUDA/12.1.1"], target_systems=["alvis"], provides_hvdcore=False
        ),
    ],
    "logging": common.logging_config(),
    "general": common.general_config(),
}
