"""The MNIST check through a discovered Lmod module, with no environment entry written for it.

A small EESSI-layout tree is made with real Lmod: stand-ins for EESSI's Python, mpi4py and
PyTorch modules (backed by the test's venv, since EESSI is not reachable here), and hvdcore
installed into it with ``modules/install.sh prefix`` from a real sdist (the hand-written module
``modules/all/hvdcore/0.1.0-foss-2023a.lua``). ReFrame then runs with a config whose only
environment discovers ``hvdcore`` modules (``tests/reframe_configs/lmod_modules.py``): the check
must find the module, load it in the job, run the examples the module installed under
``$EBROOTHVDCORE/share/hvdcore/examples``, and pass.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from lmod_shell import LMOD_CMD, install_hvdcore_tree, lmod_shell
from reframe_helpers import CHECKS, ROOT, reframe_exe

pytestmark = [pytest.mark.reframe, pytest.mark.lmod, pytest.mark.mpi, pytest.mark.torch,
              pytest.mark.slow]

MODULE = "hvdcore/0.1.0-foss-2023a"
CONFIG = ROOT / "tests" / "reframe_configs" / "lmod_modules.py"


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """<tree>/modules/all (stand-ins + hvdcore) and <tree>/software/hvdcore/0.1.0-foss-2023a."""
    return install_hvdcore_tree(tmp_path_factory.mktemp("eessi-rfm"), MODULE)


def test_install_ships_the_examples(tree: Path) -> None:
    shipped = tree / "software" / "hvdcore" / "0.1.0-foss-2023a" / "share" / "hvdcore" / "examples"
    for script in ("pytorch_mnist.py", "keras_mnist.py"):
        assert (shipped / script).read_text() == (ROOT / "examples" / script).read_text()


def test_mnist_check_runs_with_a_discovered_module(tree: Path, tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    # A login shell with Lmod (its `module` function is exported to the job scripts), nothing of
    # this checkout on PYTHONPATH: hvdcore can only come from the module.
    env = {
        "MODULEPATH": str(tree / "modules" / "all"),
        "LMOD_CMD": LMOD_CMD,
        "PYTHONUNBUFFERED": "1",
        "TMPDIR": os.environ.get("TMPDIR", "/tmp"),
    }
    cmd = " ".join([*reframe_exe(), "-C", str(CONFIG), "-c", str(CHECKS / "hvdcore_mnist.py"),
                    "-r", "--prefix", str(tmp_path / "rfm"), "--report-file", str(report)])
    t0 = time.monotonic()
    proc = lmod_shell(cmd, extra_env=env, timeout=600, cwd=tmp_path)
    seconds = time.monotonic() - t0
    out = proc.stdout + proc.stderr
    assert report.exists(), out[-6000:]
    cases = {tc["display_name"]: tc for run in json.loads(report.read_text())["runs"]
             for tc in run["testcases"]}
    # Discovery found the module; only its torch variants exist (the environment declares
    # torch, and the module's name does not say otherwise).
    assert sorted(cases) == [
        f"HvdcoreMnistCheck %scale=1_node %baseline.framework=torch "
        f"%baseline.hvdcore_module={MODULE}",
        f"MnistBaseline %framework=torch %hvdcore_module={MODULE} "
        "~lmodlocal:default+hvdcore-find",
    ], out[-3000:]
    # Both run and pass sanity; whether the speed is within its bounds depends on the machine and
    # its load (tests assert results, not speed: see test_reframe_local.py), so a case may fail
    # in the performance stage only.
    for name, tc in cases.items():
        assert tc["result"] == "pass" or tc["fail_phase"] == "performance", (
            f"{name}: {tc['result']} in {tc['fail_phase']}: {tc['fail_reason']}\n{out[-4000:]}")
    assert (proc.returncode == 0) == all(tc["result"] == "pass" for tc in cases.values())
    check = next(tc for name, tc in cases.items() if name.startswith("HvdcoreMnistCheck"))
    assert check["num_tasks"] == 2
    perf = {k.split(":")[-1]: v[0] for k, v in check["perfvalues"].items()}
    assert perf["efficiency"] > 0 and perf["images_per_sec"] > 0

    where = Path(check["outputdir"] if check["result"] == "pass" else check["stagedir"])
    script = (where / "rfm_job.sh").read_text()
    assert f"module load {MODULE}" in script, script
    job_out = (where / check["job_stdout"]).read_text()
    root = tree / "software" / "hvdcore" / "0.1.0-foss-2023a"
    assert f"hvdcore-mnist-examples: {root}/share/hvdcore/examples" in job_out, job_out[-2000:]
    assert "hvdcore-mnist: ranks=2 " in job_out
    assert seconds < 400, f"took {seconds:.0f}s"
