"""Data-plane check: five collectives of torch tensors on the device plane and the host plane,
each against the raw transport in the same job, per size as nccl-tests reports them.

Runs ``checks/src/hvdcore_planes.py`` twice in one job on a full node (at least 2 ranks):

``device``
    CUDA/ROCm tensors over NCCL/RCCL on GPU partitions; elsewhere CPU tensors over the Gloo
    plane (the job exports ``HVDCORE_CPU_OPERATIONS=gloo``). Raw peer: ``torch.distributed``
    on the same process group.
``host``
    CPU tensors over hvdcore's MPI plane. Raw peer: mpi4py on the tensors' NumPy views.

Sizes from 8 B, x4, up to ``max_bytes`` (None: the partition's ``extras['planes_max_bytes']``,
else 1 GiB with GPUs and 4 MiB without); the host plane stops at
``extras['planes_host_max_bytes']``, else at the smaller of that and 64 MiB (on an H200 node,
2026-12-04, the device plane's sweep to 1 GiB took about a minute; the host plane's, on the
CPUs, had not finished 5 minutes later). Per size and collective: algbw and busbw (nccl-tests'
factors), hvdcore's and raw's, hvdcore and raw timed in alternating blocks, every result of
both against a NumPy reference.

Sanity: both launches exited 0, every collective reported every size, and no result differed
from its reference (``wrong=0``).

Performance, per plane and collective (``allreduce``, ``allgather``, ``reducescatter``,
``alltoall``, ``broadcast``), at the largest size:

``<plane>_<op>_ratio`` (x, judged everywhere)
    raw time / hvdcore time (hvdcore's busbw over raw's) in each pair of adjacent blocks, the
    highest over the ``reps`` pairs (the worker's ``best_pair_ratio``; the summary's table
    shows the median), floor ``min_ratio`` (0.4): the verdict fails only when hvdcore lost to
    raw by more than the floor in *every* pair, which a real slowdown of that size does and a
    burst of load on a shared node does not (it lands on some pairs). Measured on the 2-core
    VM, load 9-15 (other jobs, bursty ``stress-ng --cpu 1``), 2026-12-03, 13 clean runs (10
    nights, 3 confirmation runs): one run's pairs of one collective spread 0.14-14.1; some
    median of the pairs fell under 0.4 in 6 runs (host allgather/reducescatter), some upper
    quartile in 3 (and in 1 of 6 test runs), some highest pair in 1 (host reducescatter:
    hvdcore 10 ms, raw 1.3 ms in all 5 pairs; the host plane's verdict wants a node less
    loaded than that). ``FAULTS_DATA_PATH=delay_us=200000,op=alltoall,plane=device`` (200 ms
    before every alltoall of the device plane) reads 0.009-0.016 in every pair. A slowdown hidden by the spread of the pairs is left to the nightly history
    band (``checks/tools/history.py``), which judges this figure night against night.
``<plane>_<op>_busbw`` (GB/s)
    hvdcore's busbw: judged against the partition's recorded references where recorded
    (``checks/tools/record_references.py``), reported elsewhere.
``<plane>_<op>_link_fraction`` (of the link, only where the plane's link rate is declared)
    hvdcore's busbw / the rate of the link the plane's collectives cross in this one-node job
    (GB/s, one direction: NVLink/xGMI for NCCL/RCCL, memory or shared-memory copy for the
    host plane), from ``extras['planes_link_GBps']`` (a number: the device plane's; or
    ``{"device": ..., "host": ...}``) or ``-S device_link_GBps=`` / ``-S host_link_GBps=``.
    Reported; judged with a floor where ``min_link_fraction`` is set (and, in the nightly job,
    against its history like every variable).

The per-size table and plot are in the suite's summary (``checks/tools/planes_report.py``).
"""

import reframe as rfm
import reframe.utility.sanity as sn
from reframe.core.builtins import parameter, run_after, run_before, sanity_function, variable

from hvdcore_checks import MAINTAINERS, HvdcoreJobMixin
from hvdcore_checks.discovery import ENV_PROVIDED, hvdcore_modules, module_partitions

OPS = ("allreduce", "allgather", "reducescatter", "alltoall", "broadcast")
PLANES = ("device", "host")
LINE = (r"hvdcore-planes: plane=(?P<plane>\S+) op=(?P<op>\S+) bytes=(?P<bytes>\d+) "
        r"ranks=(?P<ranks>\d+) time_us=(?P<time>\S+) algbw_GBps=(?P<algbw>\S+) "
        r"busbw_GBps=(?P<busbw>\S+) raw_time_us=(?P<raw_time>\S+) "
        r"raw_busbw_GBps=(?P<raw_busbw>\S+) ratio=(?P<ratio>\S+) raw=(?P<raw>\S+) "
        r"wrong=(?P<wrong>\d+)")
DONE = r"hvdcore-planes-done: plane=(?P<plane>\S+) ranks=(?P<ranks>\d+) transport=(?P<transport>\S+)"
#: Largest message where the partition says nothing (bytes).
GPU_MAX_BYTES = 1 << 30
CPU_MAX_BYTES = 4 << 20
#: The host plane's largest message where the partition says nothing (bytes).
HOST_MAX_BYTES = 64 << 20


def size_count(max_bytes: int) -> int:
    """How many sizes the worker measures up to ``max_bytes`` (8 B, x4, then ``max_bytes``)."""
    count, b = 1, 8
    while b < max_bytes:
        count, b = count + 1, b * 4
    return count


@rfm.simple_test
class HvdcoreDataPlanesCheck(rfm.RunOnlyRegressionTest, HvdcoreJobMixin):
    """allreduce/allgather/reducescatter/alltoall/broadcast per size on both planes vs raw."""

    descr = "hvdcore data planes: 5 collectives per size vs the raw transport"
    valid_systems = ["*"]
    sourcesdir = "src"
    executable = "python3"
    hvdcore_module = parameter(hvdcore_modules())
    #: Largest message (bytes); None: ``extras['planes_max_bytes']``, else 1 GiB / 4 MiB.
    max_bytes = variable(int, type(None), value=None)
    #: Timed pairs of blocks (one of hvdcore, one of raw) per size.
    reps = variable(int, value=5)
    #: Calls per block.
    block = variable(int, value=3)
    #: Floor of every ``<plane>_<op>_ratio``.
    min_ratio = variable(float, value=0.4)
    #: Link rate of the device plane (GB/s); None: ``extras['planes_link_GBps']``.
    device_link_GBps = variable(float, type(None), value=None)
    #: Link rate of the host plane (GB/s); None: ``extras['planes_link_GBps']['host']``.
    host_link_GBps = variable(float, type(None), value=None)
    #: Floor of every ``<plane>_<op>_link_fraction``; None: reported, no bound.
    min_link_fraction = variable(float, type(None), value=None)
    time_limit = "20m"
    exclusive_access = True
    tags = {"hvdcore", "planes", "cpu", "gpu", "nightly", "production"}
    maintainers = MAINTAINERS

    @run_after("init")
    def _use_module(self):
        self.use_environments("torch")
        if self.hvdcore_module != ENV_PROVIDED:
            self.valid_systems, envs = module_partitions(self.hvdcore_module)
            self.valid_prog_environs = [f"{e}" for e in envs]
            self.modules = [self.hvdcore_module]

    def largest(self, plane: str = "device") -> int:
        """The largest message ``plane`` measures on this partition (bytes)."""
        if self.max_bytes is not None:
            device = self.max_bytes
        else:
            default = GPU_MAX_BYTES if self.gpus_per_node() else CPU_MAX_BYTES
            device = int(self.part_extras.get("planes_max_bytes", default))
        if plane == "device":
            return device
        return int(self.part_extras.get("planes_host_max_bytes", min(device, HOST_MAX_BYTES)))

    def link_rate(self, plane: str) -> float | None:
        """The declared rate (GB/s) of the link ``plane``'s collectives cross, or None."""
        given = getattr(self, f"{plane}_link_GBps")
        if given is not None:
            return given
        declared = self.part_extras.get("planes_link_GBps")
        if isinstance(declared, dict):
            declared = declared.get(plane)
        elif plane != "device":
            declared = None  # a single number is the device plane's link
        return None if declared is None else float(declared)

    @run_after("setup")
    def _program(self):
        # one rank per GPU (NCCL takes no two ranks on one GPU); at least 2 ranks on CPUs
        rpn = self.ranks_per_node() if self.gpus_per_node() else max(2, self.ranks_per_node())
        self.num_tasks = self.num_tasks_per_node = rpn
        self.request_node_resources(rpn)
        self.common = [f"--reps={self.reps}", f"--block={self.block}"]
        self.executable_opts = ["hvdcore_planes.py", "--plane=device",
                                f"--max-bytes={self.largest('device')}", *self.common]
        if not self.gpus_per_node():  # the device plane of a CPU partition: Gloo
            self.prerun_cmds = [*self.prerun_cmds, "export HVDCORE_CPU_OPERATIONS=gloo"]
        self.record_launcher_exit()
        ref = {f"{p}_{op}_ratio": (1.0, self.min_ratio - 1.0, None, "x")
               for p in PLANES for op in OPS}
        links = {p: rate for p in PLANES if (rate := self.link_rate(p))}
        if self.min_link_fraction is not None:
            ref.update({f"{p}_{op}_link_fraction":
                        (1.0, self.min_link_fraction - 1.0, None, "fraction")
                        for p in links for op in OPS})
        self.reference = {"*": ref}
        self.perf_variables = {
            **{f"{p}_{op}_ratio": sn.make_performance_function(self._largest(p, op, "ratio"),
                                                               "x")
               for p in PLANES for op in OPS},
            **{f"{p}_{op}_busbw": sn.make_performance_function(self._largest(p, op, "busbw"),
                                                               "GB/s")
               for p in PLANES for op in OPS},
            **{f"{p}_{op}_link_fraction": sn.make_performance_function(
                self._largest(p, op, "busbw") / rate, "fraction")
               for p, rate in links.items() for op in OPS},
        }
        self.apply_recorded_references()

    @run_before("run")
    def _host_run(self):
        self.job.num_tasks = self.num_tasks
        self.job.num_tasks_per_node = self.num_tasks_per_node
        launch = self.job.launcher.run_command(self.job)
        self.postrun_cmds = [*self.postrun_cmds, "unset HVDCORE_CPU_OPERATIONS",
                             f"{launch} python3 hvdcore_planes.py --plane=host "
                             f"--max-bytes={self.largest('host')} " + " ".join(self.common),
                             'echo "hvdcore-launcher-exit: $?"']

    def _largest(self, plane: str, op: str, field: str):
        # hvdcore's busbw is the field after algbw (raw_busbw_GBps comes later on the line)
        where = r"algbw_GBps=\S+ busbw_GBps" if field == "busbw" else r"best_pair_ratio"
        pattern = (rf"hvdcore-planes: plane={plane} op={op} bytes={self.largest(plane)} .*"
                   rf"{where}=(\S+)")
        return sn.extractsingle(pattern, self.stdout, 1, float)

    @sanity_function
    def validate(self):
        lines = sn.extractall(LINE, self.stdout, "wrong", int)
        sizes = sum(size_count(self.largest(p)) for p in PLANES)
        return sn.all([
            sn.assert_eq(sn.max(sn.extractall(r"hvdcore-launcher-exit: (\d+)", self.stdout, 1,
                                              int)), 0,
                         msg="a launch exited {0}: a rank failed (see the job's stderr)"),
            sn.assert_eq(sn.count(sn.extractall(DONE, self.stdout)), 2,
                         msg="{0} of {1} planes finished"),
            sn.assert_eq(sn.count(lines), len(OPS) * sizes,
                         msg="{0} results of {1} (5 collectives x each plane's sizes)"),
            sn.assert_eq(sn.sum(lines), 0,
                         msg="{0} results differ from the NumPy reference (see wrong= lines)"),
        ])
