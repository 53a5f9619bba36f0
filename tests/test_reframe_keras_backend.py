"""The MNIST check's ``keras_backend`` variable (issue 61), on ReFrame's dry run (no training).

``-S keras_backend=torch`` exports ``KERAS_BACKEND=torch`` in the job script of every Keras
(framework ``tensorflow``) variant and its baseline, never in the torch example's; the default
is ``tensorflow`` (the nightly set); an unknown backend is an error naming the allowed ones.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from reframe_helpers import CHECKS, run_reframe

pytestmark = [pytest.mark.reframe]


def _scripts(workdir: Path, *options: str) -> dict[str, str]:
    workdir.mkdir()
    proc = run_reframe(["-C", str(CHECKS / "config" / "local.py"),
                        "-c", str(CHECKS / "hvdcore_mnist.py"), "-n", "HvdcoreMnistCheck",
                        *options, "--dry-run"], workdir, timeout=180)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    return {p.parent.name: p.read_text()
            for p in (workdir / "rfm" / "stage").rglob("rfm_job.sh")}


def _backends(scripts: dict[str, str], framework_script: str) -> set[str]:
    return {m for text in scripts.values() if framework_script in text
            for m in re.findall(r"^export KERAS_BACKEND=(\S+)$", text, re.M)}


def test_keras_backend_reaches_the_keras_jobs_only(tmp_path: Path) -> None:
    default = _scripts(tmp_path / "default")
    assert _backends(default, "keras_mnist.py") == {"tensorflow"}
    torch = _scripts(tmp_path / "torch", "-S", "keras_backend=torch")
    assert _backends(torch, "keras_mnist.py") == {"torch"}
    assert _backends(torch, "pytorch_mnist.py") == set()
    assert len([t for t in torch.values() if "keras_mnist.py" in t]) >= 2  # check + baseline


def test_unknown_keras_backend_is_an_error(tmp_path: Path) -> None:
    proc = run_reframe(["-C", str(CHECKS / "config" / "local.py"),
                        "-c", str(CHECKS / "hvdcore_mnist.py"), "-n", "HvdcoreMnistCheck",
                        "-S", "keras_backend=jax", "--dry-run"], tmp_path, timeout=180)
    out = proc.stdout + proc.stderr
    assert "keras_backend='jax': one of tensorflow, torch expected" in out, out[-4000:]
