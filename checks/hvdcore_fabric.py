"""Fabric check: the transport NCCL/RCCL, MPI and the Gloo plane really took, against what the
partition declares.

Runs ``checks/src/hvdcore_fabric_probe.py`` (one allreduce per plane) on ``min(2 nodes,
max_nodes)`` x ``ranks_per_node`` ranks with ``NCCL_DEBUG=INFO`` (subsystems INIT, NET,
GRAPH), Open MPI's ``pml_base_verbose``/``mtl_base_verbose``/``btl_base_verbose`` and
hvdcore's info log, and reads the job's output with ``hvdcore_checks/fabric.py``.

What a partition must have comes from its ``extras`` (a check variable of the same name with
a ``expect_`` prefix overrides it on the command line, e.g. ``-S expect_nccl_net=IB``):
``nccl_net`` (``IB``, ``AWS Libfabric``, ``Socket``), ``gpus_per_node``, ``nics_per_node``,
``mpi_transport`` (``sm``, ``tcp``, ``ucx``, ``ofi``: a BTL, the PML, or the MTL under
``pml cm``), ``gloo_interface``. Sanity FAILS on any mismatch, on a TCP-socket fallback where a
network plugin is declared, and on a declaration no line of the output proves (``gpus_per_node``
with no NCCL line naming a host's GPUs), quoting the line that proves it; what was found is
printed in the job's output either way, with what could not be judged (a NIC count the
aws-ofi plugin does not print: ``hvdcore-fabric not judged: ...``).
"""

import os

import reframe as rfm
import reframe.utility.sanity as sn
from reframe.core.builtins import parameter, run_after, sanity_function, variable

from hvdcore_checks import MAINTAINERS, HvdcoreJobMixin
from hvdcore_checks.discovery import ENV_PROVIDED, hvdcore_modules, module_partitions
from hvdcore_checks.fabric import judge, parse, unjudged

DECLARED = ("nccl_net", "gpus_per_node", "nics_per_node", "mpi_transport", "gloo_interface")


@rfm.simple_test
class HvdcoreFabricCheck(rfm.RunOnlyRegressionTest, HvdcoreJobMixin):
    """The transports a job took (NCCL/RCCL network, MPI, Gloo) vs the partition's extras."""

    descr = "hvdcore fabric: NCCL/RCCL network, MPI transport, Gloo interface"
    valid_systems = ["*"]
    sourcesdir = "src"
    executable = "python3"
    executable_opts = ["hvdcore_fabric_probe.py"]
    hvdcore_module = parameter(hvdcore_modules())
    #: The NCCL/RCCL network the job must take; "": the partition's ``extras['nccl_net']``.
    expect_nccl_net = variable(str, value="")
    #: The MPI transport the job must take; "": the partition's ``extras['mpi_transport']``.
    expect_mpi_transport = variable(str, value="")
    #: The Gloo plane's interface; "": the partition's ``extras['gloo_interface']``.
    expect_gloo_interface = variable(str, value="")
    time_limit = "10m"
    tags = {"hvdcore", "fabric", "cpu", "gpu", "ci", "nightly", "production"}
    maintainers = MAINTAINERS

    @run_after("init")
    def _use_module(self):
        self.use_environments("torch")
        if self.hvdcore_module != ENV_PROVIDED:
            self.valid_systems, envs = module_partitions(self.hvdcore_module)
            self.valid_prog_environs = [f"{e}" for e in envs]
            self.modules = [self.hvdcore_module]

    @run_after("setup")
    def _program(self):
        nodes = min(2, int(self.part_extras.get("max_nodes", 1)))
        per_node = self.ranks_per_node()
        if nodes == 1 and not self.gpus_per_node():  # (NCCL takes no two ranks on one GPU)
            per_node = max(2, per_node)
        self.num_tasks, self.num_tasks_per_node = per_node * nodes, per_node
        self.request_node_resources(per_node)
        self.env_vars = {**self.env_vars, "NCCL_DEBUG": "INFO",
                         "NCCL_DEBUG_SUBSYS": "INIT,NET,GRAPH",
                         "OMPI_MCA_pml_base_verbose": "10", "OMPI_MCA_mtl_base_verbose": "10",
                         "OMPI_MCA_btl_base_verbose": "100",
                         "HVDCORE_LOG_LEVEL": "info"}
        if not self.gpus_per_node():
            self.env_vars["HVDCORE_CPU_OPERATIONS"] = "gloo"
        self.record_launcher_exit()

    def declared(self) -> dict:
        """What the partition must have (its extras, overridden by ``expect_*``)."""
        out = {k: self.part_extras[k] for k in DECLARED if self.part_extras.get(k)}
        for key in ("nccl_net", "mpi_transport", "gloo_interface"):
            if getattr(self, f"expect_{key}"):
                out[key] = getattr(self, f"expect_{key}")
        return out

    @sn.deferrable
    def _fabric_matches(self):
        text = "".join(open(os.path.join(self.stagedir, f), errors="replace").read()
                       for f in (self.stdout.evaluate(), self.stderr.evaluate()))
        found = parse(text)
        print(f"hvdcore-fabric found: nccl_net={found.nccl_net} nics={found.nics} "
              f"gpus_per_node={found.gpus_per_node} gdr={found.gdr} "
              f"paths={sorted(found.paths)} mpi={sorted(found.mpi_transports)} "
              f"gloo_interface={found.gloo_interface}")
        for note in unjudged(found, self.declared()):
            print(f"hvdcore-fabric not judged: {note}")
        problems = judge(found, self.declared())
        return sn.evaluate(sn.assert_false(problems, msg="fabric mismatch: " +
                                           " | ".join(problems)))

    @sanity_function
    def validate(self):
        return sn.all([
            self.assert_launcher_ok(),
            sn.assert_found(r"hvdcore-fabric: ranks=\d+ .* ok=1", self.stdout,
                            msg="the probe's allreduces did not finish correctly"),
            self._fabric_matches(),
        ])
