"""Elastic Keras 3 on the torch and JAX backends (issue 58's Keras part off TensorFlow): one job
per backend under ``hvdcorerun``'s elastic flags, a rank lost mid-epoch.

``--min-np 2 --max-np 2`` with a spare host: B is SIGKILLed in epoch 1 after a step that was
not committed; C takes its place. The program (tests/programs/elastic_keras_backend.py) trains
with ``model.fit``, hvdcore.keras' DistributedOptimizer, ``hvd.elastic.KerasState`` and the
elastic callbacks (commit every 2 batches, counted across epochs, and at each epoch's end).
The job must end on 2 ranks with the optimizer's iterations = epochs x steps (the rolled-back
step is done once, not lost, not twice), the same weights on both ranks, equal to a NumPy
reference of that many steps; A and C resume at A's last commit.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import numpy as np
import pytest

from harness.elastic_jobs import A, B, C, epochs, run

pytestmark = [pytest.mark.slow]

if importlib.util.find_spec("keras") is None:
    pytest.skip("needs Keras 3", allow_module_level=True)

PROGRAM = Path(__file__).resolve().parent / "programs" / "elastic_keras_backend.py"
EPOCHS, STEPS = 3, 3


def reference(steps: int, size: int = 2) -> list[float]:
    """Dense(4 -> 1) from w = 0.1, b = 0 after ``steps`` SGD(0.01) steps on MSE, x = 1, y = 0
    (every rank's batch is the same, so the average is the batch's gradient; the bias is a
    local variable, its gradient divided by the job's ``size``)."""
    w, b = np.full(4, 0.1), 0.0
    for _ in range(steps):
        g = 2.0 * (w.sum() + b)  # d mean((x.w + b)^2) / d w_j = d / d b
        w, b = w - 0.01 * g, b - 0.01 * g / size
    return [*w, b]


def _backend(name: str) -> object:
    marks = [pytest.mark.skipif(importlib.util.find_spec(name) is None,
                                reason=f"needs {name} (scripts/setup.sh installs it)")]
    if name == "torch":
        marks.append(pytest.mark.torch)
    return pytest.param(name, marks=marks)


@pytest.mark.parametrize("backend", [_backend("torch"), _backend("jax")])
def test_a_sigkilled_worker_is_replaced(tmp_path: Path, backend: str) -> None:
    plan = {"epochs": EPOCHS, "steps": STEPS, "commit_every": 2, "expect": {"0": 2},
            "fail": [{"epoch": 1, "batch": 2, "host": B, "how": "kill",
                      "once": str(tmp_path / "killed")}]}
    proc, out = run(tmp_path, [[0, [f"{A}:1", f"{B}:1", f"{C}:1"]]], plan,
                    "--min-np", "2", "--max-np", "2", timeout=420,
                    env={"KERAS_BACKEND": backend}, program=PROGRAM)
    assert proc.returncode == 0, out[-6000:]
    assert "was killed by signal 9" in out, out[-6000:]
    done = re.findall(r"^DONE rank (\d+) size (\d+) steps (\d+) epoch (\d+) w (\S+)$", out, re.M)
    assert sorted(int(r) for r, *_ in done) == [0, 1], out[-6000:]
    assert {(int(n), int(s), int(e)) for _, n, s, e, _ in done} == {(2, EPOCHS * STEPS,
                                                                     EPOCHS)}, done
    (weights,) = {w for *_, w in done}  # identical on both ranks
    assert [float(v) for v in weights.split(",")] == pytest.approx(
        reference(EPOCHS * STEPS), abs=2e-6)
    # the last commit before B's death: epoch 1 after its first batch (2 batches a commit)
    begun = re.findall(r"^START rank \d+ size \d+ epoch (\d+) batch (\d+) host (\S+)$", out,
                       re.M)
    assert sorted((int(e), int(b), h) for e, b, h in begun if h != B)[-2:] == [
        (1, 1, A), (1, 1, C)], out[-6000:]
    assert {h for *_, h in epochs(out)[2]} == {A, C}
