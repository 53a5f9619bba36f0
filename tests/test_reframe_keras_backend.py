"""The MNIST check's ``keras_backend`` variable (issue 61), on ReFrame's dry run (no training).

``-S keras_backend=torch`` (or ``jax``) exports ``KERAS_BACKEND`` in the job script of every Keras
(framework ``tensorflow``) variant and its baseline, never in the torch example's; the torch
variant trains the mpi4py peer, the JAX one none (no ``mpi_ratio``); the default is
``tensorflow`` (the nightly set); an unknown backend is an error naming the allowed ones.
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
    for backend in ("torch", "jax"):
        scripts = _scripts(tmp_path / backend, "-S", f"keras_backend={backend}")
        assert _backends(scripts, "keras_mnist.py") == {backend}
        assert _backends(scripts, "pytorch_mnist.py") == set()
        keras = [t for t in scripts.values() if "keras_mnist.py" in t]
        assert len(keras) >= 2, backend  # check + baseline
        # the mpi4py peer (--mode=mpi) runs on torch; JAX has none, so no mpi_ratio
        assert any("--mode=mpi" in t for t in keras) == (backend == "torch"), backend


def test_unknown_keras_backend_is_an_error(tmp_path: Path) -> None:
    proc = run_reframe(["-C", str(CHECKS / "config" / "local.py"),
                        "-c", str(CHECKS / "hvdcore_mnist.py"), "-n", "HvdcoreMnistCheck",
                        "-S", "keras_backend=numpy", "--dry-run"], tmp_path, timeout=180)
    out = proc.stdout + proc.stderr
    assert "keras_backend='numpy': one of tensorflow, torch, jax expected" in out, out[-4000:]
