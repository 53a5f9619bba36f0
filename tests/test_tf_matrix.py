"""The TensorFlow version matrix: the TensorFlow binding's tests on the oldest and the newest
TensorFlow an easyconfig names, each with the Keras EasyBuild builds it with, in venvs of their
own (``scripts/tf_matrix.sh``; cached under /var/tmp). The project's venv has the newest
tensorflow-cpu, which the rest of the suite tests.

- ``2.13.0``: TensorFlow-2.13.0-foss-2023a (EESSI 2023.06), bundling Keras 2.13.1 as ``keras``;
- ``2.18.1+keras3.9.2``: TensorFlow-2.18.1-foss-2024a, Keras 3.9.2 (plus tf-keras 2.18).

Each runs what proves the binding on that TensorFlow (``SELECT``): every collective, tape and
process-set check against NumPy, the Horovod parity and model-parallel programs, and the Keras
fit and semantics against the single-process reference, at 2 ranks, in one launch
(``JOINED_LAUNCHES`` in conftest.py), plus the eager zero-copy exchange (DLPack of this
TensorFlow). The rest runs in the main venv only, with the newest TensorFlow: world sizes 1
and 3 (``tests/test_tensorflow.py``, ``tests/test_tensorflow_semantics.py``), tf-keras
(their ``tf_keras`` parameters), the dead rank (``test_dead_rank_ends_the_job``) and the MNIST
example's training (``test_no_mpi_install.py``). The test asserts that the inner
run used the versions asked for and that every selected test passed.
"""

from __future__ import annotations

import os
import re
import subprocess

import pytest
from conftest import ROOT

pytestmark = [pytest.mark.tensorflow, pytest.mark.tf_matrix, pytest.mark.mpi, pytest.mark.slow]

#: version spec -> (TensorFlow, Keras) the venv must have
MATRIX = {
    "2.13.0": ("2.13.0", "2.13.1"),
    "2.18.1+keras3.9.2": ("2.18.1", "3.9.2"),
}

#: the inner pytest's selection (scripts/tf_matrix.sh's default adds tf-keras and the dead rank)
SELECT = ["-k", "(np2 or eager_results_share) and not tf_keras",
          "tests/test_tensorflow.py", "tests/test_tensorflow_semantics.py"]


@pytest.mark.timeout(1500)
@pytest.mark.parametrize("spec", list(MATRIX))
def test_tensorflow_binding_on(spec: str) -> None:
    tf_version, keras_version = MATRIX[spec]
    try:
        # env given explicitly: the environment pytest started with, not the C environ, which
        # an in-process MPI_Init would have filled with variables that make mpirun fail
        proc = subprocess.run([str(ROOT / "scripts" / "tf_matrix.sh"), spec, "--", *SELECT], cwd=ROOT,
                              env=dict(os.environ), capture_output=True, text=True,
                              timeout=1400)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"scripts/tf_matrix.sh {spec} did not finish in 1400 s\n{exc.stdout}")
    out = proc.stdout + proc.stderr
    tail = "\n".join(line for line in out.splitlines()
                     if not line.startswith("WARNING: Location"))[-8000:]
    assert f"tensorflow {tf_version} keras {keras_version}" in proc.stdout, tail
    assert proc.returncode == 0, tail
    summary = re.findall(r"^=+ (.*) in [0-9.]+s.* =+$", proc.stdout, re.M)
    assert summary and re.fullmatch(r"\d+ passed(, \d+ deselected)?", summary[-1]), tail
    # every selected test ran, none skipped: the collectives, the Keras fit and semantics with
    # this TensorFlow's Keras (keras2, or keras3), the eager zero-copy exchange with this
    # TensorFlow, and the Horovod parity program (issue 52: TF1 graphs, dtypes, IndexedSlices,
    # scaling), the model-parallel one (issue 58: register_local_source, TF1 broadcast grads)
    # and the API parity program (Horovod's names and argument orders, Keras 2 and 3),
    # SyncBatchNormalization, TF1 training in a MonitoredTrainingSession and bad arguments on
    # one rank failing every rank (eager, tf.function, TF1 graphs)
    assert int(summary[-1].split()[0]) == 11, tail
