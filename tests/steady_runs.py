"""Launches shared by tests/test_steady_path.py and tests/test_steady_batch.py (one xdist group,
``XDIST_GROUPS`` in conftest.py): steady_path.py and steady_batch.py run one after the other in
one ``mpirun`` (tests/programs/several.py), each with its modes, and each test judges its own
program's lines. Per world size and ``HVDCORE_HOTPATH`` one launch, not four: the import and
``init()`` cost more than most modes. The ``direct`` modes call both implementations
themselves whatever ``HVDCORE_HOTPATH`` says, so they ride on the ``=0`` launch (it runs
wherever the compiled module does not)."""

from __future__ import annotations

import subprocess

from conftest import program, run_mpi

_RUNS: dict[tuple, subprocess.CompletedProcess[str]] = {}


def steady_launch(np_: int, hotpath: str, kind: str = "plain") -> subprocess.CompletedProcess[str]:
    """The shared launch at ``np_`` ranks with ``HVDCORE_HOTPATH=hotpath``, once per process:
    kind "plain" (steady_path ``exact``, steady_batch ``engine``, both ``direct`` at hotpath
    "0"), "hierarchical" (the same two sweeps with ``HVDCORE_HIERARCHICAL_ALLREDUCE=1``) or
    "late" (steady_path ``late`` and steady_batch ``engine late``, ``HVDCORE_PROGRESS=auto``)."""
    key = (np_, hotpath, kind)
    if key not in _RUNS:
        env = {"HVDCORE_HOTPATH": hotpath}
        if kind == "late":
            path, batch = "late", "engine,late"
            env["HVDCORE_PROGRESS"] = "auto"
        else:
            path, batch = "exact", "engine"
            if kind == "hierarchical":
                env["HVDCORE_HIERARCHICAL_ALLREDUCE"] = "1"
            elif hotpath == "0":
                path, batch = "exact,direct", "engine,direct"
        _RUNS[key] = run_mpi(np_, [program("several.py"), "-", f"steady_path.py:{path}",
                                   f"steady_batch.py:{batch}"], env=env, timeout=400)
    return _RUNS[key]
