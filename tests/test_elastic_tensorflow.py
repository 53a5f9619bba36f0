"""Elastic TensorFlow jobs on localhost: Keras ``model.fit`` with ``KerasState`` and the elastic
callbacks, and a TF2 custom loop with ``TensorFlowState``, under ``hvdcorerun`` (elastic flags).

Each mode runs two jobs (the program is tests/programs/elastic_keras.py, the discovery script
tests/programs/elastic_hosts.py, and tests/harness/elastic_jobs.py, the torch tests' harness):

- hosts added, a rank failed by an exception, hosts removed, in one job: 2 ranks, C joins at
  epoch 1 (3 ranks; #2844: every rank, C included, starts at epoch 1 batch 0), B raises after
  a step the survivors did not commit yet (they roll it back and resume epoch 2 at their last
  commit), C is removed at epoch 3 (1 rank); in ``fit`` with Horovod's
  BroadcastGlobalVariablesCallback too (each generation's first fit broadcasts on every rank);
- a SIGKILLed worker replaced: ``--min-np 2 --max-np 2`` with a spare host.

The jobs commit every 2 steps and at each epoch's end; ``loop`` counts the 2 steps within the
epoch, Horovod's ``CommitStateCallback`` in ``fit`` across epochs (it commits after epoch 2's
first step: 3 steps a epoch), so the failures are placed per mode (:data:`ROLLED_BACK`). Every job must end with the optimizer's iteration count equal to epochs x steps (a step lost
or done twice changes it) and the same weights on every rank, equal to a one-process
reference of that many steps.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest.importorskip("tensorflow")

from harness.elastic_jobs import epochs, run  # noqa: E402  (the torch tests' harness)

pytestmark = [pytest.mark.tensorflow, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
PROGRAM = ROOT / "tests" / "programs" / "elastic_keras.py"
A, B, C = "127.0.0.1", "127.0.0.2", "127.0.0.3"
EPOCHS, STEPS = 4, 3
#: mode -> {epoch: (the step after which a worker fails, where the survivors resume)}: the
#: failed step is applied but not committed, so a missing rollback shows in the step count
ROLLED_BACK = {"fit": {1: (2, 1), 2: (2, 1)}, "loop": {1: (1, 0), 2: (1, 0)}}


def reference(steps: int) -> list[float]:
    """The program's weights after ``steps`` SGD steps in one process."""
    import keras
    import numpy as np

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
    x, y = np.ones((2, 4), np.float32), np.zeros((2, 1), np.float32)
    for _ in range(steps):
        model.train_on_batch(x, y)
    return [float(v) for w in model.weights for v in np.ravel(w.numpy())]


def job(tmp_path: Path, mode: str, schedule: list, plan: dict, *flags: str):
    """One elastic job of the TF program (the torch test's harness, another program)."""
    plan = {"mode": mode, "epochs": EPOCHS, "steps": STEPS, "commit_every": 2, **plan}
    return run(tmp_path, schedule, plan, *flags, timeout=420, program=PROGRAM)


def finished(proc, out: str, size: int) -> None:
    """A successful job: ``size`` final ranks, epochs x steps iterations, the reference's
    weights on every rank."""
    assert proc.returncode == 0, out[-6000:]
    done = re.findall(r"^DONE rank (\d+) size (\d+) steps (\d+) epoch (\d+) w (\S+)$", out, re.M)
    assert sorted(int(r) for r, *_ in done) == list(range(size)), out[-6000:]
    assert {(int(n), int(s), int(e)) for _, n, s, e, _ in done} == {(size, EPOCHS * STEPS,
                                                                     EPOCHS)}, done
    (weights,) = {w for *_, w in done}
    assert [float(v) for v in weights.split(",")] == pytest.approx(
        reference(EPOCHS * STEPS), abs=2e-6)


def starts(out: str) -> list[tuple[int, int, int, int, str]]:
    """(rank, size, epoch, batch, host) of each START line (the function began, after sync)."""
    return [(int(r), int(n), int(e), int(b), h) for r, n, e, b, h in re.findall(
        r"^START rank (\d+) size (\d+) epoch (\d+) batch (\d+) host (\S+)$", out, re.M)]


@pytest.mark.parametrize("mode", ["fit", "loop"])
def test_hosts_added_a_rank_failure_and_hosts_removed(tmp_path: Path, mode: str) -> None:
    """Scale up (C joins at epoch 1, at epoch 1 batch 0: #2844), B raises in epoch 2 after an
    uncommitted step (A and C roll it back), C removed at epoch 3."""
    fail_at, resume_at = ROLLED_BACK[mode][2]
    proc, out = job(tmp_path, mode,
                    [[0, [f"{A}:1", f"{B}:1"]], [1, [f"{A}:1", f"{B}:1", f"{C}:1"]],
                     [3, [f"{A}:1"]]],
                    {"expect": {"0": 2, "1": 3, "3": 1}, "bcast_callback": mode == "fit",
                     "fail": [{"epoch": 2, "batch": fail_at, "host": B, "how": "raise",
                               "once": str(tmp_path / "failed")}]},
                    "--min-np", "1")
    finished(proc, out, 1)
    seen = epochs(out)
    assert [sorted({h for *_, h in seen[e]}) for e in range(EPOCHS)] == [
        [A, B], [A, B, C], [A, B, C], [A]], out[-6000:]
    begun = starts(out)
    # size 3 starts at epoch 1 batch 0 on every rank, C included (#2844)
    assert sorted((e, b, h) for _, n, e, b, h in begun if n == 3) == [
        (1, 0, A), (1, 0, B), (1, 0, C)], begun
    # after B's failure: A and C resume epoch 2 at their last commit
    assert sorted((e, b, h) for _, n, e, b, h in begun if n == 2)[-2:] == [
        (2, resume_at, A), (2, resume_at, C)], begun
    assert "planned failure on 127.0.0.2" in out
    assert "host 127.0.0.3 joins the job" in out and "hosts left the job: 127.0.0.3" in out


@pytest.mark.parametrize("mode", ["fit", "loop"])
def test_a_sigkilled_worker_is_replaced(tmp_path: Path, mode: str) -> None:
    """--min-np 2 --max-np 2 with a spare host: B is SIGKILLed in epoch 1 after a step A has
    not committed, and C takes its place: A rolls that step back and resumes with C."""
    fail_at, resume_at = ROLLED_BACK[mode][1]
    proc, out = job(tmp_path, mode, [[0, [f"{A}:1", f"{B}:1", f"{C}:1"]]],
                    {"expect": {"0": 2},
                     "fail": [{"epoch": 1, "batch": fail_at, "host": B, "how": "kill",
                               "once": str(tmp_path / "killed")}]},
                    "--min-np", "2", "--max-np", "2")
    finished(proc, out, 2)
    assert "was killed by signal 9" in out
    assert sorted((e, b, h) for _, _, e, b, h in starts(out) if h != B)[-2:] == [
        (1, resume_at, A), (1, resume_at, C)], out[-6000:]
    assert {h for *_, h in epochs(out)[2]} == {A, C}
