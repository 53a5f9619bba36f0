"""FAULTS_DATA_PATH: a slower data path with unchanged results (what the degraded checks use)."""

from __future__ import annotations

import pytest
from conftest import ROOT, run_mpi

from hvdcore import errors
from hvdcore.backends.degraded import DataPathFault, DegradedBackend, parse
from hvdcore.backends.mpi import MPIBackend

COLLECTIVES = str(ROOT / "checks" / "src" / "hvdcore_collectives.py")


def test_parse_accepts_both_parts_in_any_order() -> None:
    assert parse("") == DataPathFault()
    assert parse("delay_us=250, repeat=3") == DataPathFault(3, 250e-6)
    assert parse("scale=1.5") == DataPathFault(scale=1.5)


@pytest.mark.parametrize("text", ["repeat=0", "repeat=x", "delay_us=-1", "slow=2", "repeat",
                                  "scale=0.5", "scale=x"])
def test_parse_rejects_bad_values_naming_the_variable(text: str) -> None:
    with pytest.raises(errors.ConfigError, match=r"FAULTS_DATA_PATH=.*expected"):
        parse(text)


@pytest.mark.mpi
def test_slowed_collectives_still_match_numpy(world_size: int) -> None:
    """Every collective of the ReFrame collectives program, with 3 runs of each data call, a
    delay before it and 1.5x its time after it, still equals the NumPy reference on every
    rank."""
    res = run_mpi(world_size, [COLLECTIVES, "--sizes=1,1000", "--bw-bytes=65536", "--reps=3",
                               "--latency-reps=20"],
                  env={"FAULTS_DATA_PATH": "repeat=3,delay_us=100,scale=1.5"}, timeout=120)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    assert f"failed=0 ranks={world_size}" in res.stdout, out
    assert "FAIL" not in res.stdout, out
    assert ("FAULTS_DATA_PATH=repeat=3,delay_us=100,scale=1.5: the data path is deliberately "
            "slowed") in out


@pytest.mark.mpi
def test_malformed_value_stops_init_on_every_rank() -> None:
    res = run_mpi(2, [COLLECTIVES, "--sizes=1"], env={"FAULTS_DATA_PATH": "repeat=zero"},
                  timeout=60)
    assert res.returncode != 0
    assert "FAULTS_DATA_PATH='repeat=zero': expected" in res.stdout + res.stderr


def test_fused_calls_are_slowed_too() -> None:
    """A fused allreduce (the executor's ``allreduce_pieces``) goes through the wrapper's
    slowed allreduce, not straight to the wrapped backend (which ``__getattr__`` would give):
    the degraded checks slow the gradients, which are fused."""
    from types import SimpleNamespace

    import numpy as np
    from mpi4py import MPI

    inner = MPIBackend()
    calls = []
    real = inner.allreduce
    inner.allreduce = lambda *a: (calls.append(a[1].size), real(*a))  # type: ignore[method-assign]
    slowed = DegradedBackend(inner, DataPathFault(repeat=3))
    pieces = [np.arange(3, dtype=np.float32), np.arange(4, dtype=np.float32)]
    out = np.zeros(7, np.float32)
    slowed.allreduce_pieces(SimpleNamespace(comm=MPI.COMM_SELF), pieces, out, "sum")
    assert list(out) == [0, 1, 2, 0, 1, 2, 3]
    assert calls == [7, 7, 7], "every fused call runs repeat=3 times"
