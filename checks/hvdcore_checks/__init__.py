"""Helpers shared by the hvdcore ReFrame checks (checks/*.py): scales, job set-up, discovery.

Not part of the installed ``hvdcore`` package. The check files import it by name: ReFrame puts
the directory of the file it loads (``checks/``) on ``sys.path`` while loading it (see "Imports"
in checks/README.md). Inside, the package imports itself relatively, so that a check outside
``checks/`` (``checks/faults/``) can load it by path with ReFrame's
``reframe.utility.import_module_from_file``.
"""

from .capability_rules import evaluate_report, required_capabilities
from .discovery import (
    ENV_PROVIDED,
    hvdcore_modules,
    module_environments,
    module_frameworks,
)
from .examples import EXAMPLES_DIR, MNIST_EXAMPLES, MnistExample, locate_examples
from .failures import failure_reason
from .jobsetup import HvdcoreJobMixin
from .scales import SCALES, Scale, layout
from .selection import MAINTAINERS, TAGS
from .variants import ScaledVariantMixin

__all__ = [
    "ENV_PROVIDED",
    "EXAMPLES_DIR",
    "HvdcoreJobMixin",
    "MAINTAINERS",
    "MNIST_EXAMPLES",
    "MnistExample",
    "SCALES",
    "Scale",
    "ScaledVariantMixin",
    "TAGS",
    "evaluate_report",
    "failure_reason",
    "hvdcore_modules",
    "layout",
    "locate_examples",
    "module_environments",
    "module_frameworks",
    "required_capabilities",
]
