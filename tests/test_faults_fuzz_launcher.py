"""Hypothesis fuzzing of hvdcorerun flags, hostfiles and HVDCORE_* values (in-process, --dry-run).

Every input must end as a launch command (exit 0) or a one-line usage error (exit 2), and
``hvdcore.config.load`` must return a Config or raise ConfigError naming the variable.
"""

from __future__ import annotations

import shutil

import pytest

from faults import fuzz_launcher as fl

EXAMPLES = 60


@pytest.fixture(scope="module")
def mpi_version() -> str:
    if shutil.which("mpirun") is None:
        pytest.fail("mpirun not found: install openmpi-bin (scripts/setup.sh does)")
    version = fl._mpi_version()
    assert version and "Open MPI" in version or "HYDRA" in (version or "")
    return version or ""


@pytest.mark.parametrize("target", ["argv", "hostfiles", "environment"])
def test_launcher_fuzz(target: str, mpi_version: str) -> None:
    fn = {"argv": fl.fuzz_argv, "hostfiles": fl.fuzz_hostfiles,
          "environment": fl.fuzz_environment}[target]
    stats = fn(EXAMPLES, mpi_version)
    assert stats.examples >= EXAMPLES
    assert stats.usage_errors > 0, "the fuzzer never produced a bad input"
    assert not stats.failures, "\n".join(stats.failures[:20])
