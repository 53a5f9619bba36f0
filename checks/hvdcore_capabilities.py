"""Capability check: ``hvdcorerun --check-build --json`` on a compute node of each partition.

One variant per framework the environment provides (feature ``torch`` / ``tensorflow``; for a
discovered ``hvdcore`` module, the framework its name says, else the discovering environment's). Sanity:
every capability the partition declares (features ``mpi``, ``gpu``/``nvgpu`` -> cuda + nccl,
``amdgpu`` -> rocm + nccl, ``cuda-aware-mpi``, extras ``hvdcore_require``) and the framework are
built AND available on the node; otherwise the check fails and prints each missing item with the
reason from hvdcore's report. A partition without GPUs must not claim them (nor configure them).
"""

import json
import os

import reframe as rfm
import reframe.utility.sanity as sn
from reframe.core.builtins import parameter, run_after, sanity_function
from reframe.core.exceptions import SanityError

from hvdcore_checks import (
    MAINTAINERS,
    TAGS,
    HvdcoreJobMixin,
    evaluate_report,
    required_capabilities,
)
from hvdcore_checks.discovery import (
    ENV_PROVIDED,
    hvdcore_modules,
    module_environments,
)

REPORT = "capabilities.json"


@sn.deferrable
def assert_capable(path, partition, required, features, gpus_per_node):
    """True, or a SanityError naming each missing item with the reason from hvdcore's report."""
    try:
        with open(path) as fh:
            text = fh.read()
        report = json.loads(text[text.index("{"):])
    except (OSError, ValueError) as exc:
        problems = [f"no JSON capability report ({exc}): see the job's stderr"]
    else:
        problems = evaluate_report(report, required, features, gpus_per_node)
    if problems:
        raise SanityError(
            f"{partition} requires {', '.join(required)}; missing: " + "; ".join(problems)
        )
    return True


@rfm.simple_test
class HvdcoreCapabilitiesCheck(rfm.RunOnlyRegressionTest, HvdcoreJobMixin):
    """Every capability the partition declares is built and available on its compute nodes."""

    descr = "hvdcore capabilities (hvdcorerun --check-build --json) match the partition"
    valid_systems = ["*"]
    framework = parameter(["torch", "tensorflow"])
    hvdcore_module = parameter(hvdcore_modules())
    sourcesdir = None
    executable = "$HVDCORERUN"
    executable_opts = ["--check-build", "--json"]
    num_tasks = 1
    num_tasks_per_node = 1
    time_limit = "5m"
    tags = {"hvdcore", "capabilities", "cpu", "gpu", *TAGS["capabilities"]}
    maintainers = MAINTAINERS

    @run_after("init")
    def _needs_framework(self):
        self.use_environments(self.framework)
        if self.hvdcore_module != ENV_PROVIDED:
            # where discovery found the module, for the framework it provides
            self.valid_systems, self.valid_prog_environs = module_environments(
                self.hvdcore_module, self.framework)
            self.modules = [self.hvdcore_module]

    @run_after("setup")
    def _resources(self):
        self.request_node_resources(1)
        self.required = required_capabilities(
            self.current_partition.features, self.part_extras, self.framework
        )
        # The report goes to a file: the launcher's own messages stay out of the JSON.
        # --require limits the probes to these items (no TensorFlow import for torch) and makes
        # hvdcorerun exit 1 when one is not built; the sanity check judges availability too.
        names = sorted({n for req in self.required for n in req.split("|")})
        self.executable_opts = [
            "--check-build", "--json", f"--require={','.join(names)}", f"> {REPORT}"
        ]
        self.postrun_cmds = [f"cat {REPORT}"]

    @sanity_function
    def validate(self):
        return assert_capable(
            os.path.join(self.stagedir, REPORT), self.current_partition.fullname, self.required,
            self.current_partition.features, self.gpus_per_node(),
        )
