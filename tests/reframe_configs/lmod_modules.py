"""This host with Lmod and EESSI-style discovery only: no venv environment, no explicit hvdcore.

The one environment, ``hvdcore-find``, has the feature ``hvdcore-modules``: the checks load each
``hvdcore`` module that ``module avail`` finds on ``$MODULEPATH`` (set by the test to a tree made
with ``modules/install.sh prefix``) and run with it. Local scheduler, ``mpirun``, 2 ranks, as
``checks/config/local.py``. Both modules of ``checks/config/`` are loaded the way ReFrame loads
a configuration file (``import_module_from_file`` with ``load_parents``: their directory is on
the path while they load).
"""

import copy
import os

from reframe.utility import import_module_from_file

_config_dir = os.path.join(os.path.dirname(__file__), "..", "..", "checks", "config")
modules_environment = import_module_from_file(os.path.join(_config_dir, "common.py"),
                                              load_parents=True).modules_environment
_local = import_module_from_file(os.path.join(_config_dir, "local.py"),
                                 load_parents=True).site_configuration

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
