"""The job set-up every hvdcore check shares: environment, launcher options, GPUs, CPUs per rank.

What the partition declares (see checks/config/common.py) decides the job:

- ``extras['launcher_options']`` are added to the launcher (``srun --mpi=pmix``);
- ``extras['gpus_per_node']`` > 0 requests GPUs through the partition's ``gpu`` resource
  (``--gpus-per-node=...``; ``extras['gpu_always']`` for sites that reject jobs without GPUs);
- CPUs per rank = the partition's ``processor.num_cpus`` / ranks per node;
- the environment's ``extras['venv']`` is activated in the job script, and ``$HVDCORERUN`` is ``hvdcorerun``, or
  ``python3 -m hvdcore.runner`` where the console script is not on PATH (uninstalled
  checkout).
"""

from __future__ import annotations

import reframe as rfm
import reframe.utility.sanity as sn
from reframe.core.builtins import run_after, run_before

__all__ = ["HvdcoreJobMixin", "HVDCORERUN_SHIM"]

# ReFrame 4.10 renamed RegressionMixin (kept as a deprecated alias).
_Plugin = getattr(rfm, "RegressionTestPlugin", None) or rfm.RegressionMixin

#: Sets ``$HVDCORERUN`` to the console script, or to ``python3 -m hvdcore.runner`` where it is
#: not on PATH (a launcher cannot start a shell function, so this is a variable).
HVDCORERUN_SHIM = 'HVDCORERUN="$(command -v hvdcorerun || echo python3 -m hvdcore.runner)"'



class HvdcoreJobMixin(_Plugin):
    """Mixin for run-only checks that launch hvdcore programs on a partition."""

    def use_environments(self, *features: str) -> None:
        """Run in environments that provide hvdcore and every feature in ``features``.

        Call it from the check's own ``run_after("init")`` hook (base-class hooks run first, so
        a hook here would not see what the check decides in its own hooks).
        """
        self.valid_prog_environs = [" ".join(["+hvdcore", *(f"+{f}" for f in features)])]

    @property
    def part_extras(self) -> dict:
        """The current partition's ``extras``."""
        return self.current_partition.extras

    def ranks_per_node(self) -> int:
        """Ranks a full node of the current partition runs."""
        return int(self.part_extras.get("ranks_per_node", 1))

    def gpus_per_node(self) -> int:
        """GPUs per node of the current partition (0 on CPU partitions)."""
        return int(self.part_extras.get("gpus_per_node", 0))

    def request_node_resources(self, tasks_per_node: int) -> None:
        """CPUs per rank and GPUs per node for ``tasks_per_node`` ranks on each node."""
        cpus = self.current_partition.processor.num_cpus or self.ranks_per_node()
        self.num_cpus_per_task = max(1, cpus // max(1, self.ranks_per_node(), tasks_per_node))
        gpus = self.gpus_per_node()
        if gpus:
            want = min(gpus, tasks_per_node)
            if want or self.part_extras.get("gpu_always"):
                self.extra_resources = {"gpu": {"num_gpus_per_node": max(1, want)}}

    def apply_recorded_references(self, scale: str | None = None,
                                  framework: str | None = None) -> None:
        """Judge absolute variables against the partition's recorded references.

        ``extras['references']`` (written by ``checks/tools/record_references.py`` from a
        known-good run, loaded by the site config) maps reference keys to
        ``{variable: [ref, lower, upper, unit]}``. Recorded entries win over the check's own
        for this partition; variables without one keep the check's references (the
        machine-independent ratios are judged everywhere). ``efficiency`` keeps its recorded
        value without bounds: it compares with a baseline measured in an earlier job.
        """
        from .references import INFORMATION_ONLY, lookup, reference_key

        recorded = lookup(self.part_extras.get("references") or {},
                          reference_key(type(self).__name__, scale, framework))
        for var in INFORMATION_ONLY & set(recorded):  # shown beside the value, never judged
            recorded[var] = (recorded[var][0], None, None, *recorded[var][3:])
        if not recorded:
            return
        part = self.current_partition.fullname
        # A fresh plain dict: ReFrame's ScopedDict flattens scopes to "scope:variable" keys.
        reference: dict[str, dict] = {}
        for scoped, entry in self.reference.items():
            scope, _, var = scoped.rpartition(":")
            reference.setdefault(scope, {})[var] = entry
        reference.setdefault(part, {}).update({var: tuple(e) for var, e in recorded.items()})
        self.reference = reference

    def record_launcher_exit(self) -> None:
        """Print the launcher's exit status right after it (``hvdcore-launcher-exit: N``).

        ReFrame's ``squeue`` scheduler (Slurm without accounting) cannot tell a job's exit code,
        so the job script itself reports whether every rank finished (srun/mpirun exit non-zero
        when any rank fails).
        """
        self.postrun_cmds = ['echo "hvdcore-launcher-exit: $?"', *self.postrun_cmds]

    def assert_launcher_ok(self):
        """Sanity: the launcher (all ranks) exited 0."""
        return sn.assert_eq(
            sn.extractsingle(r"hvdcore-launcher-exit: (\d+)", self.stdout, 1, int), 0,
            msg="the launcher exited {0}: a rank failed (see the job's stderr)",
        )

    @run_after("setup")
    def _activate_environment(self) -> None:
        cmds = []
        venv = self.current_environ.extras.get("venv")
        if venv:
            cmds.append(f"source {venv}/bin/activate")
        cmds.append(HVDCORERUN_SHIM)
        self.prerun_cmds = cmds + list(self.prerun_cmds)

    @run_before("run")
    def _launcher_options(self) -> None:
        opts = list(self.part_extras.get("launcher_options", []))
        self.job.launcher.options = opts + [
            o for o in self.job.launcher.options if o not in opts
        ]
