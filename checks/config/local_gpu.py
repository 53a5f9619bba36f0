"""This host's GPUs: local scheduler, ``mpirun``, one rank per GPU (a GPU workstation, or one
node of a GPU cluster checked from the inside).

    reframe -C checks/config/local_gpu.py -c checks/ -r

The partition claims features ``gpu``, the vendor (``nvgpu``, or ``amdgpu`` where only
``rocm-smi`` exists) and ``mpi``, so the capability check requires CUDA/ROCm and NCCL/RCCL in the
installed stack, and the synthetic benchmark runs its GPU profile. ``CHECKS_LOCAL_GPUS`` sets
the GPU count (default: what ``nvidia-smi -L`` or ``rocm-smi`` lists). Jobs run in the Python
environment that runs ReFrame, with this checkout on PYTHONPATH, as with ``local.py``.

The device-plane collectives (NCCL/RCCL vs raw torch.distributed, 8 B to
``CHECKS_PLANES_MAX_BYTES``, default 1 GiB) and the fabric check, in one command::

    CONFIG=checks/config/local_gpu.py checks/run_suite.sh gpu-results \
        -n 'HvdcoreDataPlanesCheck|HvdcoreFabricCheck'

One rank per GPU: with one GPU the planes run at 1 rank (NCCL takes no two ranks on one
GPU), where busbw's factor is 0 for all but broadcast and only the ratios and algbw say
anything. The fabric check requires NCCL to use this host's GPUs (``gpus_per_node``); a
single host declares no ``nccl_net``.
"""

import os
import shutil
import subprocess

from reframe.utility import import_module_from_file

# common.py loaded by path: ReFrame before 4.9 does not put this directory on sys.path while it
# loads a configuration file (checks/README.md, "Imports")
common = import_module_from_file(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                              "common.py"))


def _count_gpus() -> tuple[int, str]:
    """(GPUs on this host, vendor feature) from the vendor tools; (0, "nvgpu") without any."""
    if shutil.which("nvidia-smi"):
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout
        return sum(line.startswith("GPU ") for line in out.splitlines()), "nvgpu"
    if shutil.which("rocm-smi"):
        out = subprocess.run(["rocm-smi", "--showid"], capture_output=True, text=True).stdout
        return len({ln.split("]")[0] for ln in out.splitlines() if ln.startswith("GPU[")}), "amdgpu"
    return 0, "nvgpu"


_found, VENDOR = _count_gpus()
GPUS = int(os.environ.get("CHECKS_LOCAL_GPUS", _found))
if GPUS < 1:
    raise ValueError("checks/config/local_gpu.py: no GPU found on this host (nvidia-smi -L / "
                     "rocm-smi list none); set CHECKS_LOCAL_GPUS, or use checks/config/local.py")

site_configuration = {
    "systems": [
        {
            "name": "localgpu",
            "descr": f"This host's {GPUS} GPU(s): local scheduler, mpirun, one rank per GPU",
            "hostnames": [".*"],
            "modules_system": "nomod",
            "partitions": [
                {
                    "name": "gpu",
                    "descr": f"{GPUS} GPU(s) on this host, ranks launched with mpirun",
                    "scheduler": "local",
                    "launcher": "mpirun",
                    "environs": ["hvdcore-venv"],
                    "max_jobs": 1,
                    "features": ["gpu", VENDOR, "mpi"],
                    "env_vars": [*common.OMPI_AS_ROOT],
                    "processor": {"num_cpus": os.cpu_count() or 1},
                    "devices": [{"type": "gpu", "num_devices": GPUS}],
                    "extras": {
                        "ranks_per_node": GPUS,
                        "gpus_per_node": GPUS,
                        "max_nodes": 1,
                        "launcher_options": [],
                        "planes_max_bytes": int(os.environ.get("CHECKS_PLANES_MAX_BYTES",
                                                               1 << 30)),
                        "references": common.recorded_references("localgpu", "gpu"),
                    },
                }
            ],
        }
    ],
    "environments": [common.venv_environment(target_systems=["localgpu"])],
    "logging": common.logging_config(),
    "general": common.general_config(),
}
