"""What the scaling checks (MNIST, synthetic benchmark) share: one variant per framework, hvdcore
under test and scale, run against a 1-rank baseline fixture of the same framework and hvdcore.

A check using :class:`ScaledVariantMixin` has ``framework``, ``hvdcore_module`` (``env``, or a
module that discovery found) and ``scale``; its scaled test has a ``baseline`` fixture whose
parameters are the framework and the module.
"""

from __future__ import annotations

import reframe.core.runtime as rt

from .discovery import ENV_PROVIDED, module_environments
from .jobsetup import HvdcoreJobMixin
from .scales import layout
from .selection import MAINTAINERS, TAGS

__all__ = ["ScaledVariantMixin"]


class ScaledVariantMixin(HvdcoreJobMixin):
    """Environments, description and placement of one framework/hvdcore/scale variant."""

    def select_environments(self) -> None:
        """Where this framework + hvdcore variant can run (call from an init hook)."""
        if self.hvdcore_module == ENV_PROVIDED:
            self.use_environments(self.framework)
        else:
            systems, self.valid_prog_environs = module_environments(
                self.hvdcore_module, self.framework)
            self.valid_systems = [s for s in self.valid_systems if s in systems] \
                if self.valid_systems != ["*"] else systems

    def describe(self, kind: str, what: str) -> None:
        """Tags (``hvdcore``, ``kind``, framework, scale), the module to load and ``descr``."""
        if self.hvdcore_module != ENV_PROVIDED:
            self.modules = [self.hvdcore_module]
        self.tags |= {"hvdcore", kind, self.framework, self.scale, *TAGS.get(kind, ())}
        self.maintainers = list(MAINTAINERS)
        where = "" if self.hvdcore_module == ENV_PROVIDED else f", module {self.hvdcore_module}"
        self.descr = f"hvdcore {what} ({self.framework}{where}) at scale {self.scale}"

    def follow_baseline(self) -> None:
        """The scaled test's variant: framework and module from the baseline fixture's
        parameters (early access: only those), on the partitions that offer its scale (no
        skipped variants for the others), in the environments that fit (an init hook)."""
        self.framework = self.baseline.framework
        self.hvdcore_module = self.baseline.hvdcore_module
        self.valid_systems = [
            part.fullname for part in rt.runtime().system.partitions
            if isinstance(layout(self.scale, int(part.extras.get("ranks_per_node", 1)),
                                 int(part.extras.get("max_nodes", 1))), tuple)
        ]
        self.select_environments()

    def place_ranks(self) -> None:
        """Ranks, ranks per node, CPUs and GPUs for the scale on this partition (a setup
        hook); skipped where the partition cannot offer the scale."""
        fits = layout(self.scale, self.ranks_per_node(),
                      int(self.part_extras.get("max_nodes", 1)))
        self.skip_if(isinstance(fits, str), str(fits))
        self.num_tasks, self.num_tasks_per_node, _ = fits
        self.request_node_resources(self.num_tasks_per_node)
