"""Issue 62: hvdcore where mpi4py is not installed, on the Gloo controller.

The venv is real and has no mpi4py: a new ``python -m venv`` whose site-packages link every
package of the suite's venv except mpi4py (no download; this checkout's editable hvdcore
comes with them). The machine's Open MPI stays installed, so each rank also reads its own
``/proc/self/maps`` at the end (``tests/programs/maps_probe.py``): no ``libmpi`` mapped.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, mpi_env, program

from hvdcore.ports import handoff_port

pytest.importorskip("torch")
pytestmark = [pytest.mark.torch, pytest.mark.slow]

_MNIST_STEPS = ["--epochs", "1", "--max-steps-per-epoch", "15"]


@pytest.fixture(scope="module")
def nompi(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The venv's python."""
    venv = tmp_path_factory.mktemp("nompi") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    ours = Path(next(p for p in sys.path if p.endswith("site-packages") and
                     p.startswith(sys.prefix)))
    theirs = next((venv / "lib").glob("python3*/site-packages"))
    for entry in ours.iterdir():
        if not entry.name.lower().startswith("mpi4py"):
            (theirs / entry.name).symlink_to(entry)
    python = venv / "bin" / "python"
    probe = subprocess.run([str(python), "-c", "import mpi4py"], capture_output=True, text=True)
    assert probe.returncode != 0 and "No module named 'mpi4py'" in probe.stderr
    return python


def _env() -> dict[str, str]:
    drop = ("OMPI_", "PMIX_", "PMI_", "SLURM_", "HOROVOD_", "MASTER_", "HVDCORE_CONTROLLER")
    return {k: v for k, v in mpi_env().items() if not k.startswith(drop)
            and k not in ("RANK", "WORLD_SIZE")}


def _maps(out: str, np: int) -> None:
    lines = sorted(re.findall(r"MAPS rank=\d+ libmpi=\w+ mpi4py=\w+", out))
    assert lines == [f"MAPS rank={r} libmpi=False mpi4py=False" for r in range(np)], out[-3000:]


def _run(cmd: list[str], timeout: float = 300, cwd: Path = ROOT
         ) -> subprocess.CompletedProcess[str]:
    res = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=timeout,
                         cwd=cwd)
    assert res.returncode == 0, (res.stdout + res.stderr)[-5000:]
    return res


def _accuracy(out: str) -> str:
    return next(w for ln in out.splitlines() if "hvdcore-mnist:" in ln
                for w in ln.split() if w.startswith("test_accuracy="))


def test_check_build_says_why_mpi_is_absent(nompi: Path) -> None:
    res = _run([str(nompi), "-m", "hvdcore.runner", "--check-build"], timeout=120)
    assert "[ ] MPI" in res.stdout and "mpi4py package is not installed" in res.stdout
    assert "[X] Gloo" in res.stdout
    assert "Controller of a job started here: gloo (a lone process" in res.stdout, res.stdout


def test_torch_mnist_under_hvdcorerun_gloo_and_torchrun_without_mpi(nompi: Path) -> None:
    """The same 2-rank training under both launchers: no MPI in any rank, equal results."""
    example = str(ROOT / "examples" / "pytorch_mnist.py")
    gloo = _run([str(nompi), "-m", "hvdcore.runner", "--gloo", "-np", "2", str(nompi),
                 program("maps_probe.py"), example, *_MNIST_STEPS])
    _maps(gloo.stdout, 2)
    port = handoff_port()
    torchrun = _run([str(nompi), "-m", "torch.distributed.run", "--nproc-per-node", "2",
                     "--master-port", str(port), program("maps_probe.py"), example,
                     *_MNIST_STEPS])
    _maps(torchrun.stdout, 2)
    assert _accuracy(gloo.stdout) == _accuracy(torchrun.stdout)


@pytest.mark.tensorflow
def test_keras_mnist_under_hvdcorerun_gloo_without_mpi(nompi: Path, tmp_path: Path) -> None:
    """The guide's Keras example (TensorFlow backend) at 2 ranks learns, rank 0 alone prints
    and checkpoints, and its result line is the one the ReFrame MNIST check parses. Seeded:
    unseeded, one epoch of 2048 images spreads to the accuracy bound."""
    example = str(ROOT / "examples" / "keras_mnist.py")
    res = _run([str(nompi), "-m", "hvdcore.runner", "--gloo", "-np", "2", str(nompi),
                program("maps_probe.py"), example, "--epochs", "1", "--train-samples", "2048",
                "--test-samples", "512", "--batch-size", "64", "--seed", "2",
                "--checkpoint-dir", str(tmp_path / "ckpt")], timeout=400)
    _maps(res.stdout, 2)
    out = res.stdout[-6000:]
    accuracy = re.findall(r"test accuracy: ([0-9.]+)", res.stdout)
    assert len(accuracy) == 1, out  # printed by rank 0 only
    result = re.findall(r"hvdcore-mnist: ranks=2 epochs=1 test_accuracy=([0-9.]+) "
                        r"images_per_sec=([0-9.]+) images_per_sec_per_rank=([0-9.]+) "
                        r"timed_steps=(\d+) timed_seconds=([0-9.]+) timing_noise=([0-9.]+)$",
                        res.stdout, re.M)
    assert len(result) == 1, out
    assert float(result[0][0]) == float(accuracy[0]) and float(result[0][1]) > 0
    assert float(accuracy[0]) > 0.5, f"2 ranks x 1024 images should beat chance by far: {out}"
    assert (tmp_path / "ckpt" / "mnist-hvd-best.keras").is_file()
