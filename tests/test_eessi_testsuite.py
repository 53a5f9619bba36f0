"""hvdcore's checks inside an EESSI test-suite run: the real ``eessi-testsuite`` package, real Lmod.

``checks/eessi/setup_venv.sh`` makes (once, cached) the venv EESSI's suite runs ReFrame from
(``eessi-testsuite`` 1.1.0 with ReFrame 4.10.0: the suite refuses the project venv's 4.10.4).
hvdcore is installed into an EESSI-layout tree as in ``test_reframe_modules.py``, and stand-ins
for the ``EESSI/2023.06`` and ``EESSI/2025.06`` modules put that tree (resp. an empty one) on
``$MODULEPATH``, as EESSI's own modules put its stack there. ReFrame then runs
``checks/eessi/hvdcore_eessi.py`` with ``checks/config/eessi_local.py`` at the ``1_core`` and
``2_cores`` scales: ``find_modules`` must find the module in ``EESSI-2023.06`` only, the mixin
must place the ranks and load the modules, and every case must pass its sanity checks.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from lmod_shell import LMOD_CMD, install_hvdcore_tree, lmod_shell
from reframe_helpers import CHECKS, CONFIGS, QUICK_TORCH_MNIST

pytestmark = [pytest.mark.reframe, pytest.mark.lmod, pytest.mark.mpi, pytest.mark.torch,
              pytest.mark.slow]

MODULE = "hvdcore/0.2.0-foss-2023a"
SETUP_VENV = CHECKS / "eessi" / "setup_venv.sh"
TESTS = CHECKS / "eessi" / "hvdcore_eessi.py"
CONFIG = CONFIGS / "eessi_local.py"
#: (test class, scale, ranks) expected at the 1_core and 2_cores scales of a 2-core host.
EXPECTED = {
    ("EESSI_hvdcore_collectives_CPU", "2_cores", 2),
    ("EESSI_hvdcore_MNIST_CPU", "1_core", 1),
    ("EESSI_hvdcore_MNIST_CPU", "2_cores", 2),
}


@pytest.fixture(scope="module")
def eessi_venv() -> Path:
    """The cached venv with ``eessi-testsuite`` (``$CHECKS_EESSI_VENV`` or the script's
    default); skips when the package cannot be installed (no registry reachable)."""
    try:
        proc = subprocess.run(["bash", str(SETUP_VENV)], capture_output=True, text=True,
                              timeout=600, env={**os.environ, "PYTHON": sys.executable})
    except subprocess.TimeoutExpired:
        pytest.skip("checks/eessi/setup_venv.sh did not install eessi-testsuite in 600 s")
    if proc.returncode != 0:
        pytest.skip("eessi-testsuite 1.1.0 could not be installed (checks/eessi/setup_venv.sh): "
                    + proc.stderr.strip()[-600:])
    return Path(proc.stdout.strip().splitlines()[-1])


def write_eessi_stand_ins(base: Path, stack: Path) -> Path:
    """``<base>/init/EESSI/{2023.06,2025.06}.lua``: 2023.06 puts ``stack``'s modules on the
    path, 2025.06 an empty stack. Returns the directory to put on ``$MODULEPATH``."""
    init = base / "init"
    empty = base / "stack-2025.06" / "modules" / "all"
    empty.mkdir(parents=True, exist_ok=True)
    for version, modules in (("2023.06", stack / "modules" / "all"), ("2025.06", empty)):
        path = init / "EESSI" / f"{version}.lua"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f'whatis("stands in for EESSI {version}: its software stack")\n'
                        f'prepend_path("MODULEPATH", "{modules}")\n')
    return init


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The EESSI-layout tree with hvdcore installed by ``modules/install.sh prefix``."""
    return install_hvdcore_tree(tmp_path_factory.mktemp("eessi-suite"), MODULE)


def _params(display_name: str) -> dict[str, str]:
    return dict(re.findall(r"%(\w+)=(\(.*?\)|\S+)", display_name))


def test_checks_run_in_an_eessi_testsuite_run(eessi_venv: Path, tree: Path,
                                              tmp_path: Path) -> None:
    init = write_eessi_stand_ins(tmp_path, tree)
    report = tmp_path / "report.json"
    env = {"MODULEPATH": str(init), "LMOD_CMD": LMOD_CMD, "PYTHONUNBUFFERED": "1",
           "RFM_PREFIX": str(tmp_path / "rfm")}
    cmd = " ".join([
        str(eessi_venv / "bin" / "reframe"), "--config-file", str(CONFIG), "-c", str(TESTS),
        "-t", "'^(1_core|2_cores)$'", "--setvar", f"modules={MODULE}",
        *QUICK_TORCH_MNIST, "-r",  # train, not measure; the module is torch-only
        "--prefix", str(tmp_path / "rfm"), "--report-file", str(report),
    ])
    proc = lmod_shell(cmd, extra_env=env, timeout=400, cwd=tmp_path)
    out = proc.stdout + proc.stderr
    print("\n".join(line for line in out.splitlines()
                    if re.search(r"Ran \d+/\d+ test case|^\[\s*(PASSED|FAILED)\s*\]|"
                                 r"^\[\s+(OK|FAIL)\s+\]", re.sub(r"\x1b\[\d*m", "", line))))
    assert report.exists(), out[-6000:]
    cases = {tc["display_name"]: tc for run in json.loads(report.read_text())["runs"]
             for tc in run["testcases"]}

    # Discovery: the module, in EESSI-2023.06 only; the mixin's scales; CPU tests only (no GPU
    # partition), torch only (the module's name names no framework).
    found = set()
    for name, tc in cases.items():
        params = _params(name)
        assert params["module_info"] == f"('eessi_local:cpu', 'EESSI-2023.06', '{MODULE}')", name
        assert params.get("framework", "torch") == "torch", name
        found.add((name.split()[0], params["scale"], tc["num_tasks"]))
        assert tc["environ"] == "EESSI-2023.06" and tc["system"] == "eessi_local" \
            and tc["partition"] == "cpu", name
        assert {"CI", params["scale"], "hvdcore"} <= set(tc["tags"]), tc["tags"]
    assert found == EXPECTED, (found, out[-3000:])

    # Every case passes sanity; whether a speed is within bounds depends on the load of the
    # machine (tests assert results, not speed), so a case may fail in the performance stage only.
    for name, tc in cases.items():
        assert tc["result"] == "pass" or tc["fail_phase"] == "performance", (
            f"{name}: {tc['result']} in {tc['fail_phase']}: {tc['fail_reason']}\n{out[-4000:]}")
        assert all(v[0] > 0 for v in tc["perfvalues"].values()), tc["perfvalues"]
    assert (proc.returncode == 0) == all(tc["result"] == "pass" for tc in cases.values())

    # The EESSI conventions reached the jobs: modules loaded by the environment and the
    # mixin, one thread per rank, compact binding for a foss module; hvdcore ran from the module.
    software = tree / "software" / "hvdcore" / "0.2.0-foss-2023a"
    for name, tc in cases.items():
        where = Path(tc["outputdir"] if tc["result"] == "pass" else tc["stagedir"])
        script = (where / "rfm_job.sh").read_text()
        assert "module load EESSI/2023.06" in script and f"module load {MODULE}" in script
        assert "export OMP_NUM_THREADS=1" in script and "--map-by slot:PE=1" in script, script
        job_out = (where / tc["job_stdout"]).read_text()
        assert f"FULL_MODULEPATH: {tree}/modules/all/{MODULE}.lua" in job_out, job_out[-2000:]
        if "MNIST" in name:
            assert f"hvdcore-mnist-examples: {software}/share/hvdcore/examples" in job_out
            assert f"hvdcore-mnist: ranks={tc['num_tasks']} " in job_out
        else:
            assert "hvdcore-collectives: checks=" in job_out and " failed=0 ranks=2" in job_out
