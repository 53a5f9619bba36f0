"""This host with Lmod and EESSI-style discovery only: no venv environment, no explicit hvdcore.

The one environment, ``hvdcore-find``, has the feature ``hvdcore-modules``: the checks load each
``hvdcore`` module that ``module avail`` finds on ``$MODULEPATH`` (set by the test to a tree made
with ``modules/install.sh prefix``) and run with it. Local scheduler, ``mpirun``, 2 ranks, as
``checks/config/local.py``.
"""

import copy
import os
import runpy
import sys

_config_dir = os.path.join(os.path.dirname(__file__), "..", "..", "checks", "config")
sys.path.insert(0, _config_dir)

from common import modules_environment  # noqa: E402

_local = runpy.run_path(os.path.join(_config_dir, "local.py"))["site_configuration"]

site_configuration = copy.deepcopy(_local)
_system = site_configuration["systems"][0]
_system["name"] = "lmodlocal"
_system["descr"] = "This host, hvdcore from discovered Lmod modules"
_system["modules_system"] = "lmod"
_part = _system["partitions"][0]
_part["environs"] = ["hvdcore-find"]
# A test system of its own: no recorded references (the local ones are not this system's).
_part["extras"] = dict(_part["extras"], references={})
site_configuration["environments"] = [
    modules_environment("hvdcore-find", [], target_systems=["lmodlocal"], frameworks=("torch",),
                        provides_hvdcore=False),
]
