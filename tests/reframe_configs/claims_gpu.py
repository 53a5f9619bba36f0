"""A deliberately broken partition for the checks of the checks: the local host, but it claims
NVIDIA GPUs (features ``gpu``, ``nvgpu``) that this hvdcore install cannot use (no CUDA, no
NCCL). The capability check must fail on it and print the reasons from hvdcore's report.

``checks/config/local.py`` is loaded the way ReFrame loads a configuration file
(``import_module_from_file`` with ``load_parents``: its directory, where it finds ``common``, is
on the path while it loads).
"""

import copy
import os

from reframe.utility import import_module_from_file

_local = import_module_from_file(
    os.path.join(os.path.dirname(__file__), "..", "..", "checks", "config", "local.py"),
    load_parents=True,
).site_configuration

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
