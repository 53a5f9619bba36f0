"""Issue 18: Horovod's error cases through hvdcore.torch in one long-running process per rank,
including errors the binding's own checks find on one rank only (tensor type, splits form,
dtype, layout): every rank fails the call, the next collective works, shutdown returns."""

import re

import pytest
from conftest import program, run_mpi

pytestmark = pytest.mark.mpi

_ENV = {"HVDCORE_STALL_CHECK_TIME_SECONDS": "10", "HVDCORE_STALL_SHUTDOWN_TIME_SECONDS": "0",
        "ROUNDS": "3"}


def test_torch_error_cases_in_sequence(world_size: int) -> None:
    res = run_mpi(world_size, [program("torch_error_sequence.py")], env=_ENV, timeout=180)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    done = [int(d) for d in re.findall(r"SEQUENCE OK (\d+)", res.stdout)]
    # 7 one-rank argument errors + the duplicate name; 4 mismatches more at np > 1
    assert done == [3 * (8 if world_size == 1 else 12)] * world_size, out
    assert "stalled collectives" not in out, out
