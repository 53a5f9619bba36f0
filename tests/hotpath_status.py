"""Whether the compiled hot path (``hvdcore/backends/_hotpath.c``) runs in this checkout.

The steady-path tests run every check on both implementations; where the compiled module is
not built (no ``mpicc`` at install time, ``HVDCORE_BUILD_HOTPATH=0``) their compiled variants
skip with the runtime's own reason and the mpi4py variants still run.
"""

from __future__ import annotations

import functools
import subprocess
import sys

import pytest
from conftest import ROOT, mpi_env


@functools.cache
def compiled_status() -> tuple[bool, str]:
    """``(usable, why)`` from ``mpi_steady.compiled_module()`` in a process with MPI up (a
    singleton: no launcher), importing hvdcore as the tests' ranks do."""
    code = ("from mpi4py import MPI\nfrom hvdcore.backends import mpi_steady\n"
            "m, why = mpi_steady.compiled_module()\nprint(m is not None, why)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, cwd=ROOT, env=mpi_env())
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    usable, _, why = res.stdout.strip().splitlines()[-1].partition(" ")
    return usable == "True", why


def skip_unless_compiled() -> None:
    """Skip the calling test (a compiled variant) where the compiled hot path does not run."""
    usable, why = compiled_status()
    if not usable:
        pytest.skip(f"compiled hot path not usable here: {why}; the mpi4py variant runs")
