"""Collectives check: correctness of hvdcore's collectives on a full node, bandwidth and latency.

Runs checks/src/hvdcore_collectives.py on ``ranks_per_node`` ranks of one node of each partition.
Sanity: every rank finished and no result differed from the NumPy reference. Performance:
allreduce bus bandwidth (GB/s) and 1-element allreduce latency (us), with per-system references
(the lower bound of the bandwidth and the upper bound of the latency are what fail a run).
"""

import os
import sys

import reframe as rfm
import reframe.utility.sanity as sn
from reframe.core.builtins import (
    parameter,
    performance_function,
    run_after,
    sanity_function,
    variable,
)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from hvdcore_checks import HvdcoreJobMixin  # noqa: E402
from hvdcore_checks.discovery import ENV_PROVIDED, hvdcore_modules, module_partitions  # noqa: E402

PREFIX = r"hvdcore-collectives:"


@rfm.simple_test
class HvdcoreCollectivesCheck(rfm.RunOnlyRegressionTest, HvdcoreJobMixin):
    """allreduce/allgather/broadcast/alltoall/reducescatter vs NumPy; busbw and latency."""

    descr = "hvdcore collectives: correctness, bus bandwidth, latency"
    valid_systems = ["*"]
    sourcesdir = "src"
    executable = "python3"
    hvdcore_module = parameter(hvdcore_modules())
    sizes = variable(str, value="1,1000,65536")
    bw_bytes = variable(int, value=8 * 2**20)
    reps = variable(int, value=10)
    time_limit = "10m"
    exclusive_access = True  # bandwidth and latency of a node nobody else uses
    tags = {"hvdcore", "collectives", "cpu", "gpu"}
    reference = {
        # Lower bound of busbw and upper bound of latency: generous, machines are shared/noisy.
        "local": {
            "busbw": (1.0, -0.99, None, "GB/s"),
            "latency": (100.0, None, 49.0, "us"),
        },
        "generic:cpu": {
            "busbw": (0.5, -0.99, None, "GB/s"),
            "latency": (500.0, None, 19.0, "us"),
        },
        "perlmutter:gpu": {"busbw": (20.0, -0.5, None, "GB/s"), "latency": (50.0, None, 1.0, "us")},
        "lumi:gpu": {"busbw": (20.0, -0.5, None, "GB/s"), "latency": (50.0, None, 1.0, "us")},
        "*": {"busbw": (0.0, None, None, "GB/s"), "latency": (0.0, None, None, "us")},
    }

    @run_after("init")
    def _use_module(self):
        self.use_environments()
        if self.hvdcore_module != ENV_PROVIDED:
            self.valid_systems, envs = module_partitions(self.hvdcore_module)
            self.valid_prog_environs = [f"{e}" for e in envs]
            self.modules = [self.hvdcore_module]

    @run_after("setup")
    def _one_node(self):
        rpn = self.ranks_per_node()
        self.num_tasks = rpn
        self.num_tasks_per_node = rpn
        self.request_node_resources(rpn)
        self.executable_opts = [
            "hvdcore_collectives.py", f"--sizes={self.sizes}", f"--bw-bytes={self.bw_bytes}",
            f"--reps={self.reps}",
        ]
        self.record_launcher_exit()

    @sanity_function
    def validate(self):
        done = sn.count(sn.extractall(rf"{PREFIX} rank=(\d+) size=\d+ done", self.stdout, 1))
        failures = sn.extractall(rf"{PREFIX} (FAIL .*)", self.stdout, 1)
        return sn.all([
            self.assert_launcher_ok(),
            sn.assert_eq(done, self.num_tasks, msg="only {0} of {1} ranks finished"),
            sn.assert_eq(sn.count(failures), 0,
                         msg="collective results differ from the NumPy reference"),
            sn.assert_found(rf"{PREFIX} checks=\d+ failed=0 ranks={self.num_tasks}", self.stdout,
                            msg="rank 0 did not report 0 failed checks on all ranks"),
        ])

    @performance_function("GB/s")
    def busbw(self):
        return sn.extractsingle(rf"{PREFIX} busbw_GBps=(\S+)", self.stdout, 1, float)

    @performance_function("us")
    def latency(self):
        return sn.extractsingle(rf"{PREFIX} .*latency_us=(\S+)", self.stdout, 1, float)
