"""Helpers shared by the hvdcore ReFrame checks (checks/*.py): scales, job set-up, discovery.

The check files put ``checks/`` on ``sys.path`` and import this package; it is not part of the
installed ``hvdcore`` package.
"""

from hvdcore_checks.capability_rules import evaluate_report, required_capabilities
from hvdcore_checks.discovery import (
    ENV_PROVIDED,
    hvdcore_modules,
    module_environments,
    module_frameworks,
)
from hvdcore_checks.examples import EXAMPLES_DIR, MNIST_EXAMPLES, MnistExample, locate_examples
from hvdcore_checks.failures import failure_reason
from hvdcore_checks.jobsetup import HvdcoreJobMixin
from hvdcore_checks.scales import SCALES, Scale, layout

__all__ = [
    "ENV_PROVIDED",
    "EXAMPLES_DIR",
    "HvdcoreJobMixin",
    "MNIST_EXAMPLES",
    "MnistExample",
    "SCALES",
    "Scale",
    "evaluate_report",
    "failure_reason",
    "hvdcore_modules",
    "layout",
    "locate_examples",
    "module_environments",
    "module_frameworks",
    "required_capabilities",
]
