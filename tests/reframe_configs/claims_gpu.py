"""A deliberately broken partition for the checks of the checks: the local host, but it claims
NVIDIA GPUs (features ``gpu``, ``nvgpu``) that this hvdcore install cannot use (no CUDA, no
NCCL). The capability check must fail on it and print the reasons from hvdcore's report."""

import copy
import os
import runpy

_local = runpy.run_path(
    os.path.join(os.path.dirname(__file__), "..", "..", "checks", "config", "local.py")
)["site_configuration"]

site_configuration = copy.deepcopy(_local)
_system = site_configuration["systems"][0]
_system["name"] = "claimsgpu"
_part = _system["partitions"][0]
_part["name"] = "fakegpu"
_part["descr"] = "This host, wrongly declared as a node with 1 NVIDIA GPU"
_part["features"] = ["gpu", "nvgpu", "mpi"]
_part["devices"] = [{"type": "gpu", "num_devices": 1}]
_part["extras"] = dict(_part["extras"], gpus_per_node=1, ranks_per_node=1)
for _env in site_configuration["environments"]:
    _env["target_systems"] = ["claimsgpu"]
