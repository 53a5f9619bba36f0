"""Refuse, at start, a ReFrame older than the suite needs: the version found and the one needed.

What the suite needs from ReFrame, and the release that brought it:

- the run report in its 4.0 layout (``data_version`` 4.0: each test case with its partition,
  environment and test variables such as ``timing_noise``), which ``report.py``,
  ``verdict.py`` and the nightly history read; ReFrame 4.6.3 writes layout 3.1, from which
  the summary names no partition or environment (``local:default:?``) and finds none of the
  checks' variables (``check_vars``), without an error;
- results storage (``RFM_ENABLE_RESULTS_STORAGE``, ``RFM_SQLITE_DB_FILE``) and
  ``--session-extras``, where ``checks/nightly.sh`` keeps a site's history;

both new in ReFrame 4.7. The oldest release tested is EESSI 2025.06's 4.7.4
(``tests/test_nightly.py`` runs the nightly entry point on it and on the newest); the
configuration files load ``common.py`` by path, so they do not need the directory on
``sys.path`` that ReFrame puts there only from 4.9 on. ``checks/run_suite.sh`` and
``checks/nightly.sh`` (``checks/tools/nightly.py``) call :func:`refusal` before anything else.

    >>> refusal("4.6.3")
    'ReFrame 4.6.3 found; the hvdcore suite needs ReFrame >= 4.7 (run reports in layout 4.0 and results storage with session extras): load a newer ReFrame module, or pip install -e .[reframe]'
    >>> refusal("4.7.4") is None
    True
    >>> refusal("4.10.1") is None
    True
    >>> refusal("4.9.0-dev.2") is None
    True
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Sequence

__all__ = ["MINIMUM", "WHY", "check_reframe", "refusal", "version_tuple"]

#: The oldest ReFrame the suite runs on.
MINIMUM = (4, 7)
#: What the suite needs from it.
WHY = "run reports in layout 4.0 and results storage with session extras"


def version_tuple(version: str) -> tuple[int, ...]:
    """``"4.10.1-dev.0"`` -> ``(4, 10, 1)``."""
    found = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", version.strip())
    if not found:
        raise ValueError(f"ReFrame version {version!r}: MAJOR.MINOR[.PATCH] expected")
    return tuple(int(x) for x in found.groups() if x is not None)


def refusal(version: str) -> str | None:
    """The message refusing ReFrame ``version``, or None when it is new enough."""
    if version_tuple(version) >= MINIMUM:
        return None
    need = ".".join(map(str, MINIMUM))
    return (f"ReFrame {version} found; the hvdcore suite needs ReFrame >= {need} ({WHY}): "
            "load a newer ReFrame module, or pip install -e .[reframe]")


def check_reframe(reframe: str) -> str | None:
    """The refusal of the ReFrame that the command ``reframe`` runs (``reframe --version``),
    or None when it is new enough."""
    try:
        out = subprocess.run([reframe, "--version"], capture_output=True, text=True,
                             timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"cannot run {reframe} --version: {exc}"
    words = out.stdout.split()
    if out.returncode != 0 or not words:
        return (f"{reframe} --version exited {out.returncode}: "
                f"{(out.stderr or out.stdout).strip()[-300:]}")
    try:
        return refusal(words[-1])
    except ValueError as exc:
        return f"{reframe} --version printed {out.stdout.strip()!r}: {exc}"


def main(argv: Sequence[str] | None = None) -> int:
    """``reframe_version.py [REFRAME]``: exit 0 when that ReFrame (default: ``reframe`` on
    PATH) is new enough, else 2 with the refusal on stderr."""
    args = list(sys.argv[1:] if argv is None else argv)
    message = check_reframe(args[0] if args else "reframe")
    if message:
        print(message, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
