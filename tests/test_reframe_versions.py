"""The ReFrame a site has: a real ReFrame 4.7.4 (EESSI 2025.06's) in a venv of its own is
refused at start by both entry points, with the version found and the one needed, never run
into ``No module named 'common'`` or a silent subset of the checks.

The venv is cached under ``$REFRAME_MATRIX_DIR`` (default /var/tmp) as
``hvdcore-reframe-4.7.4-venv`` and made only when missing (``pip install ReFrame-HPC==4.7.4``:
78 s on the 2-core VM under a load of ~6, from pip's cache). With it cached the test takes a
few seconds.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from reframe_helpers import ROOT, reframe_env

pytestmark = [pytest.mark.reframe, pytest.mark.slow]

OLD = "4.7.4"


@pytest.fixture(scope="module")
def old_reframe() -> Path:
    """A venv holding ReFrame 4.7.4 alone (made once, then reused)."""
    venv = Path(os.environ.get("REFRAME_MATRIX_DIR", "/var/tmp")) / f"hvdcore-reframe-{OLD}-venv"
    exe = venv / "bin" / "reframe"
    if not exe.exists():
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True,
                       timeout=300)
        pip = subprocess.run([str(venv / "bin" / "pip"), "install", "-q",
                              "--disable-pip-version-check", f"ReFrame-HPC=={OLD}"],
                             capture_output=True, text=True, timeout=900)
        assert pip.returncode == 0, pip.stdout + pip.stderr
    version = subprocess.run([str(exe), "--version"], capture_output=True, text=True,
                             timeout=120)
    assert version.stdout.split()[-1] == OLD, version.stdout + version.stderr
    return venv


REFUSAL = (f"ReFrame {OLD} found; the hvdcore suite needs ReFrame >= 4.9 (configuration files "
           "import their neighbour common.py")


def test_run_suite_refuses_an_old_reframe(old_reframe: Path, tmp_path: Path) -> None:
    out = tmp_path / "suite"
    res = subprocess.run([str(ROOT / "checks" / "run_suite.sh"), str(out)],
                         env=reframe_env({"VENV": str(old_reframe)}), capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 2, res.stdout + res.stderr
    assert REFUSAL in res.stderr, res.stdout + res.stderr
    assert not out.exists(), "the suite started before refusing"


def test_nightly_refuses_an_old_reframe(old_reframe: Path, tmp_path: Path) -> None:
    results = tmp_path / "nightly"
    res = subprocess.run([str(ROOT / "checks" / "nightly.sh"), "--results", str(results)],
                         env=reframe_env({"VENV": str(old_reframe)}), capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 2, res.stdout + res.stderr
    assert f"nightly.py: {REFUSAL}" in res.stderr, res.stdout + res.stderr
    assert not (results / "nights").exists(), "a night started before refusing"
