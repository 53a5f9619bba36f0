"""The allreduce self-test the container %test sections run (python -m hvdcore.tools.allreduce_check)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from conftest import ROOT, mpi_env, run_mpi

from hvdcore.tools.allreduce_check import expected_sum

pytestmark = pytest.mark.container


def test_expected_sum_is_the_sum_of_contributions() -> None:
    # rank r contributes (i % 13) + 3r + 1 at flat index i
    got = expected_sum((2, 3), "int64", 3)
    i = np.arange(6).reshape(2, 3)
    want = sum((i % 13) + 3 * r + 1 for r in range(3))
    assert got.dtype == np.int64 and np.array_equal(got, want)


@pytest.mark.mpi
def test_allreduce_check_passes_at_every_world_size(world_size: int) -> None:
    proc = run_mpi(world_size, ["-m", "hvdcore.tools.allreduce_check"], timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for rank in range(world_size):
        assert f"allreduce_check: rank {rank} of {world_size} OK (6 checks:" in proc.stdout


def test_allreduce_check_reports_a_failed_start() -> None:
    """An init that fails (here: an unknown HVDCORE_ variable) exits 2 and says why."""
    env = mpi_env({"HVDCORE_NO_SUCH_KNOB": "1"})
    proc = subprocess.run(
        [sys.executable, "-m", "hvdcore.tools.allreduce_check"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "hvdcore.init() failed" in proc.stderr and "HVDCORE_NO_SUCH_KNOB" in proc.stderr


@pytest.mark.mpi
@pytest.mark.torch
def test_allreduce_check_torch_binding() -> None:
    pytest.importorskip("torch")
    try:
        import hvdcore.torch  # noqa: F401
    except ImportError as exc:
        pytest.skip(f"hvdcore.torch binding not importable in this checkout: {exc}")
    proc = run_mpi(2, ["-m", "hvdcore.tools.allreduce_check", "--torch"], timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("OK (7 checks:") == 2 and "torch" in proc.stdout
