"""Judging a launch of tests/programs/torch_semantics.py that ran several sections (shared by
test_torch_semantics.py on MPI and test_torch_gloo.py on Gloo)."""

from __future__ import annotations

import re
import subprocess

__all__ = ["SECTIONS", "check_section"]

SECTIONS = ["grad", "alltoall", "sparse", "bcast_state", "optimizer", "parity"]


def check_section(proc: subprocess.CompletedProcess[str], np: int, section: str) -> None:
    """Every rank printed ``<section> ... OK`` with more than 5 checks, and the run exited 0.

    The exit status is required too, so that a failure in a later section or at shutdown fails
    every test of that launch rather than none; the message says which sections passed.
    """
    out = proc.stdout + proc.stderr
    marker = f"torch-semantics {section} "
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(marker)]
    passed = sorted({ln.split()[1] for ln in proc.stdout.splitlines()
                     if ln.startswith("torch-semantics ") and ln.endswith(" OK")})
    ranks = sorted(int(re.search(r"rank=(\d+)", ln).group(1)) for ln in lines)
    assert ranks == list(range(np)), (f"{section} at np={np}: expected an OK line from every "
                                      f"rank (sections that passed: {passed}; rc "
                                      f"{proc.returncode}):\n{out[-6000:]}")
    checks = {int(re.search(r"checks=(\d+)", ln).group(1)) for ln in lines}
    assert len(checks) == 1 and checks.pop() > 5, lines
    assert proc.returncode == 0, (f"np={np}: {section} passed, but the launch failed (rc "
                                  f"{proc.returncode}; sections that passed: {passed}):\n"
                                  f"{out[-6000:]}")
