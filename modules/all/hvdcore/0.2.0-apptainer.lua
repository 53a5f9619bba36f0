-- hvdcore 0.2.0 in an Apptainer image (containers/). Like a singularity-hpc module: the commands
-- on PATH are small wrappers that run the same command inside the image with 'apptainer exec'
-- (adding --nv or --rocm when the node has NVIDIA or AMD GPUs). Layout: this file is
-- <P>/modules/all/hvdcore/<ver>.lua; <P>/software/hvdcore/<ver>/ holds hvdcore.sif and bin/
-- (modules/install.sh apptainer ... makes both).
help([==[

Description
===========
hvdcore is a Horovod-compatible distributed deep-learning runtime written in Python on mpi4py.
This module runs it from an Apptainer image: 'hvdcorerun', 'python', 'python3' and the
'hvdcore-*' commands run inside the image. Your home directory, the current directory and /tmp
are visible inside it; add more with APPTAINER_BIND (e.g. export APPTAINER_BIND=/scratch).

Environment
===========
  HVDC_IMAGE          the image (set by this module)
  HVDC_APPTAINER      the apptainer (or singularity) command, default: whichever is on PATH
  HVDC_APPTAINER_OPTS extra options for 'apptainer exec', e.g. "--cleanenv"
  HVDC_DRYRUN=1       print the command instead of running it

Usage
=====
  hvdcorerun --check-build
  hvdcorerun -np 2 python train.py

More information
================
 - Homepage: https://github.com/hvdcore/hvdcore
]==])

whatis("Name: hvdcore")
whatis("Version: 0.2.0")
whatis("Description: Horovod-compatible distributed deep-learning runtime, Apptainer image")
whatis("Homepage: https://github.com/hvdcore/hvdcore")

local modfile = myFileName()
local prefix = modfile:match("^(.*)/modules/all/" .. myModuleName() .. "/[^/]+%.lua$")
if not prefix then
    LmodError("hvdcore: module file " .. modfile .. " is not in a <prefix>/modules/all/"
              .. myModuleName() .. "/ tree, so its image cannot be found;"
              .. " install it with modules/install.sh")
end
local root = pathJoin(prefix, "software", myModuleName(), myModuleVersion())

conflict("hvdcore")

prepend_path("PATH", pathJoin(root, "bin"))
setenv("HVDC_IMAGE", pathJoin(root, "hvdcore.sif"))
setenv("EBROOTHVDCORE", root)
setenv("EBVERSIONHVDCORE", "0.2.0")
