"""Elastic TensorFlow jobs on localhost: Horovod's elastic scenarios with the TensorFlow program
(tests/programs/elastic_keras.py) under ``hvdcorerun`` (elastic flags): Keras ``model.fit`` with
``KerasState`` and the elastic callbacks, and a TF2 custom loop with ``TensorFlowState``.

The scenarios are the torch tests' (harness/elastic_scenarios.py: the same discovery schedules,
failure plans, flags and assertions), run here with a TF2 custom loop of 3 epochs x 2 steps
committed after each epoch's second step and at its end, except:

- hosts added, a rank failed by an exception, hosts removed, in one job, in ``model.fit``: 2
  ranks, C joins at epoch 1 (3 ranks; #2844: every rank, C included, starts at epoch 1 batch 0),
  B raises after a step the survivors did not commit yet (they roll it back, resume epoch 2 at
  their last commit, and B's host is blacklisted: Horovod's 'single rank failure' too), C is
  removed at epoch 3 (1 rank); with Horovod's BroadcastGlobalVariablesCallback (each
  generation's first fit broadcasts on every rank). It commits every 2 steps, counted by
  Horovod's ``CommitStateCallback`` across epochs (it commits after epoch 2's first step: 3
  steps a epoch), so the failed step is rolled back.
- 'fault tolerance without scaling' runs in a TF1-style graph and ``tf.compat.v1.Session``,
  with ``TensorFlowState(session=sess)``: A's restore op rolls back, and the spare C receives
  A's variables by the state's broadcast op. (The TF2 ``TensorFlowState`` copies, assigns and
  broadcasts with the same helpers as the fit job's ``KerasState``; its custom loop runs in
  'all ranks failure'.)

Which scenarios run where, and why: the ones that exercise TensorFlow state run here (hosts
added + a rank failure + hosts removed in fit, SIGKILL fault tolerance in a Session, all ranks
failure in the custom loop). The ones that test only the launcher's host management
('all hosts blacklisted', 'min hosts timeout', 'reset limit' in both host orders,
'resurrecting blacklisted hosts') do the same launcher work whatever the framework and run
with torch only (tests/test_elastic_torch.py): each TF job costs ~40 worker seconds in CI.

Every job that finishes must end with the optimizer's iteration count equal to epochs x steps
(a step lost or done twice changes it) and the same weights on every rank, equal to a
one-process reference of that many steps. The scenarios that end the job exercise the launcher
and the survivors' reset: they run the same small program and end early.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest.importorskip("tensorflow")

from harness import elastic_scenarios as scenarios  # noqa: E402
from harness.elastic_jobs import A, B, C, epochs  # noqa: E402

pytestmark = [pytest.mark.tensorflow, pytest.mark.slow]

PROGRAM = Path(__file__).resolve().parent / "programs" / "elastic_keras.py"


def reference(steps: int, sizes: list[int] | None = None) -> list[float]:
    """The program's weights after ``steps`` SGD steps in one process; with ``sizes`` (fit
    mode: the bias is a local variable), the bias gradient of step i divided by sizes[i]."""
    import keras
    import numpy as np
    import tensorflow as tf

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
    x, y = np.ones((2, 4), np.float32), np.zeros((2, 1), np.float32)
    if sizes is None:
        for _ in range(steps):
            model.train_on_batch(x, y)
    else:
        assert len(sizes) == steps, sizes
        kernel, bias = model.layers[0].kernel, model.layers[0].bias
        for n in sizes:
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(model(x) - y))
            g_kernel, g_bias = tape.gradient(loss, [kernel, bias])
            model.optimizer.apply_gradients([(g_kernel, kernel), (g_bias / n, bias)])
    return [float(v) for w in model.weights for v in np.ravel(w.numpy())]


def finished_after(epochs: int, steps: int, local_bias: bool = False):
    """The judge of a successful job of ``epochs`` x ``steps`` steps: ``size`` final ranks,
    that many optimizer iterations, the reference's weights on every rank (``local_bias``:
    the fit program's, whose bias gradient is divided by each step's size, as it printed)."""

    def finished(proc, out: str, size: int) -> None:
        assert proc.returncode == 0, out[-6000:]
        done = re.findall(r"^DONE rank (\d+) size (\d+) steps (\d+) epoch (\d+) w (\S+)$", out,
                          re.M)
        assert sorted(int(r) for r, *_ in done) == list(range(size)), out[-6000:]
        assert {(int(n), int(s), int(e)) for _, n, s, e, _ in done} == {(size, epochs * steps,
                                                                         epochs)}, done
        (weights,) = {w for *_, w in done}
        sizes = None
        if local_bias:
            (kept,) = set(re.findall(r"^SIZES rank \d+ (\S+)$", out, re.M))
            sizes = [int(n) for n in kept.split(",")]
        assert [float(v) for v in weights.split(",")] == pytest.approx(
            reference(epochs * steps, sizes), abs=2e-6)

    return finished


#: the shared scenarios' program: a TF2 custom loop, 3 epochs x 2 steps, a commit after each
#: epoch's second step and at its end (a failure after the first step is rolled back)
LOOP = scenarios.Program(PROGRAM, finished_after(3, 2),
                         {"mode": "loop", "epochs": 3, "steps": 2, "commit_every": 2}, 420)
#: the same in a TF1-style graph run by a Session (TensorFlowState(session=...))
SESSION = scenarios.Program(PROGRAM, LOOP.finished, {**LOOP.plan, "mode": "session"}, 420)
#: the hosts job: 4 epochs x 3 steps in fit, a commit every 2 steps
HOSTS_FIT = scenarios.Program(PROGRAM, finished_after(4, 3, local_bias=True),
                              {"mode": "fit", "epochs": 4, "steps": 3, "commit_every": 2}, 420)


def starts(out: str) -> list[tuple[int, int, int, int, str]]:
    """(rank, size, epoch, batch, host) of each START line (the function began, after sync)."""
    return [(int(r), int(n), int(e), int(b), h) for r, n, e, b, h in re.findall(
        r"^START rank (\d+) size (\d+) epoch (\d+) batch (\d+) host (\S+)$", out, re.M)]


def test_hosts_added_a_rank_failure_and_hosts_removed_in_fit(tmp_path: Path) -> None:
    """Scale up (C joins at epoch 1, at epoch 1 batch 0: #2844), B raises in epoch 2 after its
    second step, not committed (A and C roll it back to batch 1), C removed at epoch 3."""
    proc, out = scenarios.job(tmp_path, HOSTS_FIT,
                              [[0, [f"{A}:1", f"{B}:1"]], [1, [f"{A}:1", f"{B}:1", f"{C}:1"]],
                               [3, [f"{A}:1"]]],
                              {"expect": {"0": 2, "1": 3, "3": 1}, "bcast_callback": True,
                               "fail": [{"epoch": 2, "batch": 1, "host": B, "how": "raise",
                                         "once": str(tmp_path / "failed")}]},
                              "--min-np", "1")
    HOSTS_FIT.finished(proc, out, 1)
    # the size of each step kept (the local bias's divisor): B's failed step is not among them
    assert set(re.findall(r"^SIZES rank 0 (\S+)$", out, re.M)) == {"2,2,2,3,3,3,3,2,2,1,1,1"}
    seen = epochs(out)
    assert [sorted({h for *_, h in seen[e]}) for e in range(4)] == [
        [A, B], [A, B, C], [A, B, C], [A]], out[-6000:]
    begun = starts(out)
    # size 3 starts at epoch 1 batch 0 on every rank, C included (#2844)
    assert sorted((e, b, h) for _, n, e, b, h in begun if n == 3) == [
        (1, 0, A), (1, 0, B), (1, 0, C)], begun
    # after B's failure: A and C resume epoch 2 at their last commit
    assert sorted((e, b, h) for _, n, e, b, h in begun if n == 2)[-2:] == [
        (2, 1, A), (2, 1, C)], begun
    assert "planned failure on 127.0.0.2" in out
    assert "host 127.0.0.2 is blacklisted for good" in out
    assert "host 127.0.0.3 joins the job" in out and "hosts left the job: 127.0.0.3" in out


def test_fault_tolerance_without_scaling_after_sigkill_in_a_session(tmp_path: Path) -> None:
    """Horovod's 'fault tolerance without scaling' in a TF1-style graph and Session
    (``TensorFlowState(session=sess)``: its restore op on A, its broadcast op to C; before,
    'resurrecting blacklisted hosts' ran the Session, now torch only): C starts where A resumes,
    at A's last commit in epoch 1 (B is killed after the step that A commits next, and a
    commit saves before it checks the job: A keeps that step, or, when the step itself
    failed on A, rolls back to the epoch's start)."""
    proc, out = scenarios.fault_tolerance_without_scaling(tmp_path, SESSION)
    resumed = sorted((e, b, h) for _, _, e, b, h in starts(out) if h != B)[-2:]
    assert [h for *_, h in resumed] == [A, C] and resumed[0][:2] == resumed[1][:2], resumed
    assert resumed[0][:2] in ((1, 0), (1, 2)), out[-6000:]


def test_all_ranks_failure_ends_the_job(tmp_path: Path) -> None:
    """Horovod's 'all ranks failure'."""
    scenarios.all_ranks_failure(tmp_path, LOOP)
