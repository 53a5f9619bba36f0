-- hvdcore 0.2.0 for TensorFlow, installed with pip (--prefix) on top of the foss/2023a stack of
-- EESSI 2023.06 or a site's EasyBuild stack. EESSI/EasyBuild layout: this file is
-- <P>/modules/all/hvdcore/<ver>.lua
-- and the software is in <P>/software/hvdcore/<ver> (modules/install.sh prefix ... makes both).
help([==[

Description
===========
hvdcore is a Horovod-compatible distributed deep-learning runtime written in Python on mpi4py
(and torch.distributed for device tensors), with the hvdcorerun launcher.
This installation was made with 'pip install --prefix' against the TensorFlow/2.13.0-foss-2023a and
mpi4py/3.1.4-gompi-2023a modules, which it loads.

Usage
=====
  hvdcorerun --check-build --require mpi,tensorflow
  hvdcorerun -np 4 python train.py        # train.py: import hvdcore.tensorflow.keras as hvd

More information
================
 - Homepage: https://github.com/hvdcore/hvdcore
]==])

whatis("Name: hvdcore")
whatis("Version: 0.2.0")
whatis("Description: Horovod-compatible distributed deep-learning runtime on MPI (TensorFlow and Keras bindings)")
whatis("Homepage: https://github.com/hvdcore/hvdcore")

local modfile = myFileName()
local prefix = modfile:match("^(.*)/modules/all/" .. myModuleName() .. "/[^/]+%.lua$")
if not prefix then
    LmodError("hvdcore: module file " .. modfile .. " is not in a <prefix>/modules/all/"
              .. myModuleName() .. "/ tree, so its software directory cannot be found;"
              .. " install it with modules/install.sh")
end
local root = pathJoin(prefix, "software", myModuleName(), myModuleVersion())

conflict("hvdcore")

depends_on("mpi4py/3.1.4-gompi-2023a")
depends_on("TensorFlow/2.13.0-foss-2023a")

prepend_path("PATH", pathJoin(root, "bin"))
prepend_path("PYTHONPATH", pathJoin(root, "lib", "python3.11", "site-packages"))
setenv("EBROOTHVDCORE", root)
setenv("EBVERSIONHVDCORE", "0.2.0")
