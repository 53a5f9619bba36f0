"""hvdcore.tensorflow / hvdcore.keras follow Horovod 0.28.1's semantics (issue 18).

Real mpirun jobs at world sizes 1, 2, 3; each program batches many checks against references
computed in one process (see their docstrings): gradients of collectives, alltoall's return,
Horovod's TensorFlow error types with back-to-back error cases that leave the runtime working,
join, and the Keras API (register_local_var, PartialDistributedOptimizer,
BroadcastGlobalVariablesCallback(local_variables=), config round trip, .h5/.keras saving).
"""

from __future__ import annotations

import importlib.util

import pytest
from keras_flavours import KERAS_FLAVOURS, flavour_env

pytestmark = [pytest.mark.tensorflow, pytest.mark.mpi]

if importlib.util.find_spec("tensorflow") is None:
    pytest.skip("TensorFlow is not installed (pip install -e .[tensorflow])",
                allow_module_level=True)


def _assert_ok(proc, marker: str, np: int) -> None:
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"exit code {proc.returncode}\n{out[-6000:]}"
    assert proc.stdout.count(marker) == np, out[-6000:]


def test_gradients_alltoall_errors_join(world_size: int, shared_launch) -> None:
    """Horovod's collective gradients, alltoall return, TF error types (twice each), join.
    (One launch after tensorflow_collectives.py: ``SHARED_LAUNCHES`` in conftest.py.)"""
    proc = shared_launch("tf", world_size)
    _assert_ok(proc, "TF-SEMANTICS-OK", world_size)
    assert "CHECK gradient.alltoall.graph ok" in proc.stdout
    assert "CHECK recovers.alltoall.splits_length.graph ok" in proc.stdout
    if world_size > 1:
        assert "CHECK error.allreduce.dim.graph.2 ok" in proc.stdout


@pytest.mark.parametrize("flavour", KERAS_FLAVOURS)
def test_keras_local_variables_config_and_saving(world_size: int, flavour: str,
                                                 shared_launch) -> None:
    """Keras API details users rely on, with Keras 3 and tf-keras (or TensorFlow's Keras 2).
    (One launch after tensorflow_keras_fit.py: ``SHARED_LAUNCHES`` in conftest.py.)"""
    proc = shared_launch("keras", world_size, flavour_env(flavour))
    _assert_ok(proc, f"KERAS-SEMANTICS-OK flavour={flavour}", world_size)
    assert f"CHECK {flavour}.save.h5.trains_on_in_sync ok" in proc.stdout
