"""Collectives check: correctness of hvdcore's collectives on a full node, bandwidth and latency.

Runs checks/src/hvdcore_collectives.py on ``ranks_per_node`` ranks (at least 2) of one node of
each partition.
Sanity: every rank finished and no result differed from the NumPy reference.

Performance, hvdcore against raw mpi4py ``Allreduce`` in the same job, timed in interleaved
rounds (ABBA: hvdcore first in even rounds, raw first in odd ones); each ratio is the median
over rounds of the round's ratio, as the MNIST check's (a load change between rounds moves
both sides of a round, not the ratio):

``busbw_ratio`` (x, higher is better)
    hvdcore's allreduce bus bandwidth / raw mpi4py's at ``bw_bytes``. Machine-independent:
    judged on every system against :data:`RATIO_REFERENCES`.
``latency_ratio`` (x, lower is better)
    hvdcore's 1-element allreduce latency / raw mpi4py's. Judged everywhere.
``busbw`` (GB/s), ``latency`` (us)
    absolute figures: judged where the partition has references recorded from a known-good
    run (``extras['references']``, see ``checks/tools/record_references.py``); elsewhere
    reported only.

The ratio bounds come from the spread of good runs on a 2-core VM (2026-11-23, quiet: busbw
ratio 0.86-0.95, latency ratio 5.3-7.8) and fail when hvdcore becomes 2x slower than its peer
(floor 0.585, ceiling 9.6; ``FAULTS_DATA_PATH=repeat=2`` takes busbw_ratio to ~0.37, the
response cache switched off takes latency_ratio to ~11-12).
"""


import reframe as rfm
import reframe.utility.sanity as sn
from reframe.core.builtins import (
    parameter,
    performance_function,
    run_after,
    sanity_function,
    variable,
)

from hvdcore_checks import MAINTAINERS, TAGS, HvdcoreJobMixin
from hvdcore_checks.discovery import ENV_PROVIDED, hvdcore_modules, module_partitions

PREFIX = r"hvdcore-collectives:"

#: Ratios to raw mpi4py measured in the same job: judged on every system (recorded partition
#: references may override them).
RATIO_REFERENCES = {
    "*": {
        "busbw_ratio": (0.9, -0.35, None, "x"),
        "latency_ratio": (5.5, None, 0.75, "x"),
    },
}


@rfm.simple_test
class HvdcoreCollectivesCheck(rfm.RunOnlyRegressionTest, HvdcoreJobMixin):
    """allreduce/allgather/broadcast/alltoall/reducescatter vs NumPy; busbw and latency."""

    descr = "hvdcore collectives: correctness, bus bandwidth, latency"
    valid_systems = ["*"]
    sourcesdir = "src"
    executable = "python3"
    hvdcore_module = parameter(hvdcore_modules())
    #: Element counts (comma list) at which every collective is checked against NumPy, for
    #: each of float32, float64 and int32.
    sizes = variable(str, value="1,1000,65536")
    #: Message size in bytes of the bandwidth measurement (``busbw``, ``busbw_ratio``).
    bw_bytes = variable(int, value=8 * 2**20)
    #: Timed allreduces of ``bw_bytes`` (each of hvdcore and raw mpi4py).
    reps = variable(int, value=30)
    #: Timed 1-element allreduces (each of hvdcore and raw mpi4py).
    latency_reps = variable(int, value=400)
    time_limit = "10m"
    exclusive_access = True  # bandwidth and latency of a node nobody else uses
    tags = {"hvdcore", "collectives", "cpu", "gpu", *TAGS["collectives"]}
    maintainers = MAINTAINERS
    reference = RATIO_REFERENCES

    @run_after("init")
    def _use_module(self):
        self.use_environments()
        if self.hvdcore_module != ENV_PROVIDED:
            self.valid_systems, envs = module_partitions(self.hvdcore_module)
            self.valid_prog_environs = [f"{e}" for e in envs]
            self.modules = [self.hvdcore_module]

    @run_after("setup")
    def _one_node(self):
        # At least 2 ranks: the ratios compare with a raw MPI call, which moves nothing at 1
        # rank (a 1-GPU node would report a 16x "latency ratio"); this check uses no GPU.
        rpn = max(2, self.ranks_per_node())
        self.num_tasks = rpn
        self.num_tasks_per_node = rpn
        self.request_node_resources(rpn)
        self.executable_opts = [
            "hvdcore_collectives.py", f"--sizes={self.sizes}", f"--bw-bytes={self.bw_bytes}",
            f"--reps={self.reps}", f"--latency-reps={self.latency_reps}",
        ]
        self.record_launcher_exit()
        self.apply_recorded_references()

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
        return sn.extractsingle(rf"{PREFIX} busbw_GBps=.* latency_us=(\S+)", self.stdout, 1,
                                float)

    @performance_function("x")
    def busbw_ratio(self):
        return sn.extractsingle(rf"{PREFIX} busbw_ratio=(\S+)", self.stdout, 1, float)

    @performance_function("x")
    def latency_ratio(self):
        return sn.extractsingle(rf"{PREFIX} .*latency_ratio=(\S+)", self.stdout, 1, float)
