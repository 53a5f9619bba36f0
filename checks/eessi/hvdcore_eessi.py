"""hvdcore's collectives and MNIST checks as EESSI test-suite tests (``eessi-testsuite`` 1.1.0).

For sites that run the EESSI test suite nightly: add this file to the run they already have::

    reframe --config-file <their EESSI config> -c <eessi tests> -c checks/eessi/hvdcore_eessi.py \\
        --tag CI --tag 1_node -r

The tests follow the suite's conventions (``eessi.testsuite.eessi_mixin.EESSI_Mixin``):

- **module discovery**: ``module_info = parameter(find_modules(MODULE_REGEX))``, one variant per
  ``hvdcore`` module that ``module avail`` lists in each (partition, environment) of the
  configuration (``EESSI-2023.06``, ``EESSI-2025.06``, ...); ``--setvar modules=<name>`` keeps one;
- **scales**: ``eessi.testsuite.constants.SCALES`` (``1_core``, ``2_cores``, ... ``1_node``,
  ``2_nodes``, ...), as partition features and tags (``--tag 2_cores``); the mixin places the
  ranks, **one rank per compute unit**: ``COMPUTE_UNITS.CPU`` (a core) for the ``_CPU`` tests,
  ``COMPUTE_UNITS.GPU`` for the ``_GPU`` ones (``DEVICE_TYPES``; the mixin keeps a GPU test on
  partitions with the ``gpu`` feature and a CUDA module);
- ``required_mem_per_node`` (MiB), ``readonly_files``, tag ``CI``.

What is hvdcore's own comes from its checks, loaded by path with ReFrame's loader (this
directory is the only one ReFrame puts on the path while loading this file): the collectives
test **is** ``HvdcoreCollectivesCheck`` (program, variables, sanity, ``busbw``/``latency`` and the
ratios judged everywhere); the MNIST test is an ``MnistTraining`` (example, result line,
sanity, ``images_per_sec``/``images_per_sec_per_rank``). Recorded references apply as in the
hvdcore suite (``extras['references']``, keys ``<class>@scale=<EESSI scale>[@framework=...]``).
Not carried over: the MNIST efficiency against a 1-rank fixture and the torch DDP peer (the
EESSI ``1_core`` variant's ``images_per_sec_per_rank`` is the per-rank baseline to compare with).
"""

from __future__ import annotations

import importlib
import os

import reframe as rfm
from eessi.testsuite.constants import COMPUTE_UNITS, DEVICE_TYPES, INVALID_SYSTEM, SCALES
from eessi.testsuite.eessi_mixin import EESSI_Mixin
from eessi.testsuite.utils import find_modules
from reframe.core.builtins import parameter, run_after
from reframe.utility import import_module_from_file

CHECKS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# hvdcore's checks, loaded as ReFrame loads a check file (their directory on the path while they
# load, so they import hvdcore_checks); their own tests stay registered in their modules only.
_collectives = import_module_from_file(os.path.join(CHECKS, "hvdcore_collectives.py"),
                                       load_parents=True)
_mnist = import_module_from_file(os.path.join(CHECKS, "hvdcore_mnist.py"), load_parents=True)
# The package those two imported (already loaded, so no path is needed to import it again).
_lib = importlib.import_module("hvdcore_checks")

#: What EESSI-style discovery looks for: modules named ``hvdcore`` (``find_modules`` matches the
#: name without the version).
MODULE_REGEX = r"^hvdcore$"


class EESSI_hvdcore_collectives(_collectives.HvdcoreCollectivesCheck, EESSI_Mixin):
    """hvdcore's collectives check (correctness vs NumPy, busbw, latency) at EESSI scales."""

    descr = "hvdcore collectives at an EESSI scale: correctness, bus bandwidth, latency"
    #: hvdcore comes from ``module_info``, never from the environment (one value: no variants).
    hvdcore_module = parameter(["module_info"])
    module_info = parameter(find_modules(MODULE_REGEX))
    #: Every EESSI scale but ``1_core``: one rank communicates with nobody, and the ratios to
    #: raw mpi4py (judged everywhere) compare against a local copy there.
    scale = parameter([name for name in SCALES if name != "1_core"])
    sourcesdir = os.path.join(CHECKS, "src")
    readonly_files = ["hvdcore_collectives.py"]
    tags = {"hvdcore", "collectives"}
    is_ci_test = True

    def required_mem_per_node(self) -> int:
        """MiB per node: NumPy, mpi4py and a few 8 MiB buffers per rank."""
        return 256 + 512 * self.num_tasks_per_node

    @run_after("init")
    def _use_module(self) -> None:
        """Replaces the hvdcore check's: EESSI_Mixin chose partition, environment and module."""

    @run_after("setup")
    def _one_node(self) -> None:
        """Replaces the hvdcore check's placement: the ranks are the mixin's (scale, compute
        unit); the program's options and the references are the check's."""
        self.skip_if(self.num_tasks < 2, f"scale {self.scale} gives 1 rank on this partition: "
                     "the collectives need 2 or more")
        self.executable_opts = [
            "hvdcore_collectives.py", f"--sizes={self.sizes}", f"--bw-bytes={self.bw_bytes}",
            f"--reps={self.reps}", f"--latency-reps={self.latency_reps}",
        ]
        self.record_launcher_exit()
        self.apply_recorded_references(self.scale)


@rfm.simple_test
class EESSI_hvdcore_collectives_CPU(EESSI_hvdcore_collectives):
    """One rank per core."""

    device_type = DEVICE_TYPES.CPU
    compute_unit = COMPUTE_UNITS.CPU


@rfm.simple_test
class EESSI_hvdcore_collectives_GPU(EESSI_hvdcore_collectives):
    """One rank per GPU (host-buffer collectives on GPU nodes)."""

    device_type = DEVICE_TYPES.GPU
    compute_unit = COMPUTE_UNITS.GPU


class EESSI_hvdcore_MNIST(_mnist.MnistTraining, EESSI_Mixin):
    """An MNIST example trained with hvdcore at an EESSI scale (one variant per framework)."""

    framework = parameter(sorted(_mnist.MNIST_EXAMPLES))
    module_info = parameter(find_modules(MODULE_REGEX))
    #: Symlink the examples into the stage directory instead of copying them.
    all_readonly_files = True
    tags = {"hvdcore", "mnist"}
    is_ci_test = True

    def required_mem_per_node(self) -> int:
        """MiB per node: a framework process per rank."""
        return 1024 * self.num_tasks_per_node

    @run_after("init")
    def _framework_of_module(self) -> None:
        """Only the framework the module's name says (``...-TensorFlow-2.13.0``), else torch."""
        if self.framework not in (_lib.module_frameworks(self.module_name) or {"torch"}):
            self.valid_systems = [INVALID_SYSTEM]
        self.tags |= {self.framework}
        self.descr = f"hvdcore MNIST ({self.framework}, {self.module_name}) at scale {self.scale}"

    @run_after("setup")
    def _place(self) -> None:
        """Replaces ``MnistTraining``'s placement: the ranks are the mixin's; the example, its
        options (threads = CPUs per rank) and the references are the hvdcore check's."""
        self.set_program(self.scale)


@rfm.simple_test
class EESSI_hvdcore_MNIST_CPU(EESSI_hvdcore_MNIST):
    """One rank per core."""

    device_type = DEVICE_TYPES.CPU
    compute_unit = COMPUTE_UNITS.CPU


@rfm.simple_test
class EESSI_hvdcore_MNIST_GPU(EESSI_hvdcore_MNIST):
    """One rank per GPU (the examples train on the rank's GPU when the framework sees one)."""

    device_type = DEVICE_TYPES.GPU
    compute_unit = COMPUTE_UNITS.GPU
