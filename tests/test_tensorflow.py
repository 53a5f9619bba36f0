"""hvdcore.tensorflow and hvdcore.tensorflow.keras: real multi-rank runs at world sizes 1, 2, 3.

Each test's program runs many checks against references computed in one process (see the program
docstrings), so TensorFlow is imported once per launch; the collectives and the Keras fit share
their launch with the semantics programs of test_tensorflow_semantics.py (``shared_launch`` in
conftest.py). Skip locally with ``-m "not tensorflow"``.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys

import pytest
from conftest import mpi_env, program, run_mpi
from keras_flavours import KERAS_FLAVOURS, flavour_env

pytestmark = [pytest.mark.tensorflow, pytest.mark.mpi]

if importlib.util.find_spec("tensorflow") is None:
    pytest.skip("TensorFlow is not installed (pip install -e .[tensorflow])",
                allow_module_level=True)


def _assert_ok(proc, marker: str, np: int) -> None:
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"exit code {proc.returncode}\n{out[-6000:]}"
    assert proc.stdout.count(marker) == np, out[-6000:]


# the first test to ask for its world size's joined launch (the TF and Keras programs:
# JOINED_LAUNCHES in conftest.py) waits for both: pytest's 600 s per test doubled, as the
# launch's own timeout is (the sum of the two groups')
@pytest.mark.timeout(1200)
def test_collectives_tape_and_broadcast(world_size: int, shared_launch) -> None:
    """Every TF collective vs NumPy (eager + tf.function), tape gradients, process sets, errors.
    (One launch with tensorflow_semantics.py and the Keras programs: ``SHARED_LAUNCHES`` and
    ``JOINED_LAUNCHES`` in conftest.py.)"""
    proc = shared_launch("tf", world_size)
    _assert_ok(proc, "TF-COLLECTIVES-OK", world_size)
    assert "CHECK gradient_tape.allgather_sparse.graph ok" in proc.stdout


@pytest.mark.parametrize("flavour", KERAS_FLAVOURS)
def test_keras_fit_matches_single_process(world_size: int, flavour: str, shared_launch) -> None:
    """Compiled model.fit with DistributedOptimizer + callbacks equals one-process training.
    (One launch with tensorflow_keras_semantics.py, and for Keras 3 / Keras 2 with the TF
    programs of test_collectives_tape_and_broadcast: ``JOINED_LAUNCHES`` in conftest.py.)"""
    proc = shared_launch("keras", world_size, flavour_env(flavour))
    _assert_ok(proc, f"KERAS-FIT-OK flavour={flavour}", world_size)
    assert f"CHECK {flavour}.sgd_warmup_sparse.epoch1.matches_reference ok" in proc.stdout


def test_dead_rank_ends_the_job() -> None:
    """A rank that dies inside compiled fit ends the whole job with its rank named, no hang."""
    proc = run_mpi(2, [program("tensorflow_dead_rank.py")], timeout=180)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-4000:]
    assert "rank 1 exiting now" in out
    assert "UNEXPECTED" not in out, out[-4000:]
    # named by hvdcore ("rank 1") or by mpirun ("Process name: [[job,1],1] ... Exit code: 17")
    named = "rank 1" in out.replace("rank 1 exiting now", "") or (
        re.search(r"\[\[\d+,\d+\],1\]", out) and "17" in out)
    assert named, out[-4000:]


def test_eager_results_share_aligned_memory_and_copy_the_rest() -> None:
    """hvdcore.tensorflow.host_arrays against real TensorFlow: read-only input views, results
    shared through DLPack when 64-byte aligned, copied aligned otherwise (at every offset, each
    dtype, 0-d, empty, read-only, strided), kernels run on them, and a tensor on a pooled block
    keeps the block from being handed out again. A subprocess: a misaligned import aborts."""
    proc = subprocess.run([sys.executable, program("tensorflow_host_arrays.py")],
                          env=mpi_env(), capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"exit code {proc.returncode}\n{out[-6000:]}"
    assert "HOST-ARRAYS-OK" in proc.stdout, out[-6000:]
