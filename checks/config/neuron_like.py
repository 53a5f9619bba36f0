"""Example site config modelled on a Slurm GPU cluster with A100 and V100 partitions.

KISTI Neuron-like: partitions per node type (``amd_a100nv_8``: 8x A100 on AMD nodes,
``cas_v100_4``: 4x V100 on Cascade Lake nodes), and every job states the application it runs
with ``--comment=<app>`` (here ``pytorch``), which the site uses for statistics and rejects jobs
without. hvdcore from a module or a venv in $HOME. Module names are examples.

    reframe -C checks/config/neuron_like.py -c checks/ -r --system neuron:a100
"""

import os

from reframe.utility import import_module_from_file

# common.py loaded by path: ReFrame before 4.9 does not put this directory on sys.path while it
# loads a configuration file (checks/README.md, "Imports")
common = import_module_from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                              "common.py"))


def _partition(name: str, slurm_part: str, gpus: int, arch: str, cpus: int) -> dict:
    return {
        "name": name,
        "descr": f"{slurm_part}: {gpus}x NVIDIA {name.upper()} per node",
        "scheduler": "slurm",
        "launcher": "srun",
        "access": [f"--partition={slurm_part}", "--comment=pytorch"],
        "environs": ["hvdcore-mod", "hvdcore-venv"],
        "max_jobs": 4,
        "time_limit": "30m",
        "features": ["gpu", "nvgpu", "mpi"],
        "processor": {"num_cpus": cpus},
        "devices": [{"type": "gpu", "arch": arch, "num_devices": gpus}],
        "resources": common.gpu_resources("--gres=gpu:{num_gpus_per_node}"),
        "extras": {
            "ranks_per_node": gpus,
            "gpus_per_node": gpus,
            # the fabric check: NCCL over InfiniBand verbs, never TCP sockets
            "nccl_net": "IB",
            "max_nodes": 4,
            "launcher_options": common.SLURM_MPI,
            "references": common.recorded_references("neuron", name),
        },
    }


site_configuration = {
    "systems": [
        {
            "name": "neuron",
            "descr": "KISTI Neuron-like GPU cluster (A100 and V100 partitions)",
            "hostnames": [r"glogin\d+", r"gpu\d+"],
            "modules_system": "lmod",
            "partitions": [
                _partition("a100", "amd_a100nv_8", 8, "sm_80", 64),
                _partition("v100", "cas_v100_4", 4, "sm_70", 40),
            ],
        }
    ],
    "environments": [
        common.modules_environment(
            "hvdcore-mod",
            ["gcc/10.2.0", "cuda/12.1", "cudampi/openmpi-4.1.5", "hvdcore/0.2.0"],
            target_systems=["neuron"],
        ),
        common.venv_environment(venv="$HOME/hvdcore-venv", target_systems=["neuron"],
                                frameworks=["torch"], pythonpath=None),
    ],
    "logging": common.logging_config(),
    "general": common.general_config(),
}
