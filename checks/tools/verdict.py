"""The verdict of one ReFrame run, with invalid measurements told apart from failures.

``checks/run_suite.sh`` (and through it ``scripts/validate.sh``) ends with it::

    python checks/tools/verdict.py --report reframe-results/report.json [--reframe-status N]

A case whose sanity calls its figure an **invalid measurement** (the rule of
``checks/tools/report.py`` and of the nightly entry point: the failure reason starts with
``invalid measurement: `` after ReFrame's ``sanity error: ``, as every validity rule of the
checks writes it; "Invalid account" from sbatch or a CUDA "invalid device ordinal" is a failure)
is reported as ``INVALID``, never as a failure: the run was no measurement and says nothing of
hvdcore. One line per invalid and per failed case, then the verdict.

Exit status: 0 every case passed; 1 a case failed (sanity, capability, a reference bound),
whatever else; 3 no case failed but at least one measurement was invalid (measure again);
2 no report or no case in it (ReFrame did not run: ``--reframe-status`` is quoted).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import report

__all__ = ["EXIT_FAILED", "EXIT_INVALID", "EXIT_NO_RUN", "main", "verdict"]

EXIT_FAILED = 1
EXIT_NO_RUN = 2
EXIT_INVALID = 3


def verdict(cases: Sequence[report.Case]) -> tuple[int, list[str]]:
    """The exit status of ``cases`` and the lines that explain it."""
    failed = [c for c in cases if c.failed and not c.invalid]
    invalid = [c for c in cases if c.invalid]
    lines = [f"INVALID {c.name} @{c.sysenv}: {c.fail_reason[:300]}" for c in invalid]
    lines += [f"FAILED {c.name} @{c.sysenv}: {c.fail_phase}: {c.fail_reason[:300]}"
              for c in failed]
    status = EXIT_FAILED if failed else EXIT_INVALID if invalid else 0
    word = {0: "PASSED", EXIT_FAILED: "FAILED", EXIT_INVALID: "INVALID MEASUREMENT"}[status]
    lines.append(f"{word}: {len(cases)} cases, {len(failed)} failed, {len(invalid)} invalid "
                 "measurements")
    return status, lines


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry: print the verdict, exit with its status."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--report", required=True, help="ReFrame JSON run report (--report-file)")
    p.add_argument("--reframe-status", type=int, default=None,
                   help="ReFrame's exit status, quoted when there is no report")
    args = p.parse_args(argv)
    try:
        cases = report.load_report(args.report)
    except (OSError, ValueError) as exc:
        print(f"verdict.py: no verdict: cannot read {args.report} ({exc}); ReFrame exited "
              f"{args.reframe_status}", file=sys.stderr)
        return EXIT_NO_RUN
    if not cases:
        print(f"verdict.py: no test cases in {args.report}; ReFrame exited "
              f"{args.reframe_status}", file=sys.stderr)
        return EXIT_NO_RUN
    status, lines = verdict(cases)
    if status == 0 and args.reframe_status:  # every case passed, yet ReFrame reports an error
        lines.append(f"FAILED: every case passed but ReFrame exited {args.reframe_status}")
        status = EXIT_FAILED
    for line in lines:
        print(f"run_suite.sh: {line}")
    return status


if __name__ == "__main__":
    sys.exit(main())
