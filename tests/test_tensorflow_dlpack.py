"""Issue 14: TensorFlow tensors on a torch data plane through DLPack.

With ``HVDCORE_CPU_OPERATIONS=gloo`` and torch installed, ``hvdcore.tensorflow.init()`` brings
up the torch planes and TF CPU tensors reach the engine's Gloo plane through DLPack (no host
NumPy copy), eagerly and through ``tf.py_function`` in graphs; this is the same code path GPU
tensors take to NCCL (which needs a GPU: not run here). The TF programs the host path is tested
with run again, against the same references.

Issue 62: these jobs run on the Gloo controller (``hvdcorerun --gloo``, no MPI in the job), so
the TensorFlow and Keras programs are also checked against their references there.
"""

from __future__ import annotations

import pytest

pytest.importorskip("tensorflow")
pytest.importorskip("torch")
pytestmark = [pytest.mark.tensorflow, pytest.mark.torch]

GLOO = {"HVDCORE_CPU_OPERATIONS": "gloo"}


def _assert_ok(proc, marker: str, np: int) -> None:  # type: ignore[no-untyped-def]
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"exit code {proc.returncode}\n{out[-6000:]}"
    assert proc.stdout.count(marker) == np, out[-6000:]


#: the shared launch of each world size (SHARED_LAUNCHES in conftest.py), TensorFlow and torch
#: imported once in each: at 2 ranks with the Keras 3 fit, at 3 with the semantics and parity
#: programs (tests below)
GROUP = {2: "tf_collectives_keras_fit", 3: "tf"}


@pytest.mark.parametrize("np", [2, 3])
def test_tf_collectives_on_the_gloo_plane(np: int, shared_launch) -> None:
    proc = shared_launch(GROUP[np], np, GLOO, controller="gloo")
    _assert_ok(proc, "TF-COLLECTIVES-OK", np)
    assert proc.stdout.count("CPU tensors: dlpack->gloo") == np, proc.stdout[-3000:]


def test_tf_semantics_on_the_gloo_plane(shared_launch) -> None:
    proc = shared_launch("tf", 3, GLOO, controller="gloo")
    _assert_ok(proc, "TF-SEMANTICS-OK", 3)


def test_tf_parity_on_the_gloo_plane(shared_launch) -> None:
    """Issue 52's TF checks (tests/programs/tensorflow_parity.py: scaling bit for bit, every
    dtype, TF1 graphs, IndexedSlices, in-place broadcasts) with CPU tensors on Gloo (DLPack)."""
    proc = shared_launch("tf", 3, GLOO, controller="gloo")
    _assert_ok(proc, "TF-PARITY-OK", 3)
    _assert_ok(proc, "TF-MODEL-PARALLEL-OK", 3)  # issue 58's local sources, v1 broadcast grads


def test_keras_fit_on_the_gloo_plane_matches_single_process(shared_launch) -> None:
    """Keras 3's fit with TF tensors on the Gloo plane, after the collectives in the same launch
    (test_tf_collectives_on_the_gloo_plane[2]'s). tf-keras is not run again here: its
    optimizer hands the same TF tensors to the same allreduce (the plane never sees which Keras
    made them), and its fit is judged on the MPI plane at 1-3 ranks (test_tensorflow.py)."""
    flavour = "keras3"
    proc = shared_launch(GROUP[2], 2, GLOO, controller="gloo")
    _assert_ok(proc, f"KERAS-FIT-OK flavour={flavour}", 2)
