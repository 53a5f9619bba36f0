"""An install built without the compiled hot path (``HVDCORE_BUILD_HOTPATH=0``, what an install
without ``mpicc`` gets): it imports, ``hvdcorerun --check-build`` says repeated host allreduces
run through mpi4py because the module is not built, and the steady path's programs give exact
results through :class:`~hvdcore.backends.mpi_steady.PythonSteady` on 2 ranks.

The install is real: this checkout's sdist (easyconfigs/build_sdist.py) installed by pip into
a directory of its own, used through ``PYTHONPATH`` by the venv's Python (for numpy, mpi4py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import mpi_env, program, run_mpi
from lmod_shell import build_sdist_module

pytestmark = [pytest.mark.mpi, pytest.mark.slow]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``pip install --target`` of the sdist with HVDCORE_BUILD_HOTPATH=0."""
    work = tmp_path_factory.mktemp("fallback-install")
    sdist = build_sdist_module().build_sdist(work / "dist", python=sys.executable)
    target = work / "site"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HVDCORE_", "HOROVOD_"))}
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check",
         "--no-deps", "--no-build-isolation", "--target", str(target), str(sdist)],
        capture_output=True, text=True, timeout=300, cwd=work,
        env={**env, "HVDCORE_BUILD_HOTPATH": "0"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert (target / "hvdcore" / "backends" / "mpi_steady.py").is_file()
    built = sorted(str(p) for p in target.rglob("*.so"))
    assert not built, f"HVDCORE_BUILD_HOTPATH=0 still built {built}"
    return target


def _env(site: Path) -> dict[str, str]:
    """An mpirun child's environment, importing hvdcore from ``site`` only (not this checkout)."""
    return mpi_env({"PYTHONPATH": str(site)})


def _run(site: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # cwd: a directory without an hvdcore package (python -m puts the cwd first on sys.path)
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=240,
                          cwd=site.parent, env=_env(site))


def test_it_imports_from_the_install_without_the_module(site: Path) -> None:
    code = ("import importlib.util, hvdcore, hvdcore.backends.mpi_steady, hvdcore.capabilities\n"
            "print(hvdcore.__file__)\n"
            "print(importlib.util.find_spec('hvdcore.backends._hotpath'))\n")
    proc = _run(site, "-c", code)
    assert proc.returncode == 0, proc.stderr[-3000:]
    where, spec = proc.stdout.split()[-2:]
    assert Path(where).parent == site / "hvdcore", where
    assert spec == "None", spec


def test_check_build_says_mpi4py_runs_and_why(site: Path) -> None:
    proc = _run(site, "-m", "hvdcore.runner", "--check-build", "--require", "mpi")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    line = next((ln for ln in proc.stdout.splitlines()
                 if ln.startswith("Repeated host allreduces:")), "")
    assert line.startswith("Repeated host allreduces: mpi4py (not built ("), proc.stdout[-2000:]
    assert "reinstall hvdcore where mpicc is on PATH" in line, line


@pytest.mark.parametrize("prog,mode", [("steady_path.py", "exact"),
                                       ("steady_batch.py", "engine")],
                         ids=["single", "batch"])
def test_repeated_allreduces_are_exact_through_mpi4py(site: Path, prog: str, mode: str) -> None:
    """The engine asks for the compiled path (HVDCORE_HOTPATH's default) and gets mpi4py's;
    each rank checks every result bit for bit against a NumPy reference of all ranks' inputs."""
    res = run_mpi(2, [program(prog), mode], env={"PYTHONPATH": str(site)}, timeout=240)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-5000:]
    lines = [ln for ln in res.stdout.splitlines() if f" {mode} ok" in ln]
    assert sorted(int(ln.split()[1]) for ln in lines) == [0, 1], out[-3000:]
    for ln in lines:
        assert f"hvdcore={site / 'hvdcore'}," in ln, ln
        assert ln.endswith("steady=PythonSteady"), ln


def test_the_python_calls_pass_the_direct_checks(site: Path) -> None:
    res = run_mpi(2, [program("steady_path.py"), "direct"], env={"PYTHONPATH": str(site)},
                  timeout=120)
    assert res.returncode == 0, (res.stdout + res.stderr)[-5000:]
    lines = [ln for ln in res.stdout.splitlines() if " direct ok" in ln]
    assert len(lines) == 2, res.stdout
    assert all("direct ok: PythonSteady (compiled: not built (" in ln for ln in lines), lines
