"""``python -m hvdcore.runner`` = ``hvdcorerun``."""

import sys

from hvdcore.runner.cli import main

sys.exit(main())
