"""hvdcore.tensorflow / hvdcore.keras follow Horovod 0.28.1's semantics (issue 18).

Real mpirun jobs at world sizes 1, 2, 3; each program batches many checks against references
computed in one process (see their docstrings): gradients of collectives, alltoall's return,
Horovod's TensorFlow error types with back-to-back error cases that leave the runtime working,
join, the Keras API (register_local_var, PartialDistributedOptimizer,
BroadcastGlobalVariablesCallback(local_variables=), config round trip, .h5/.keras saving), and
DistributedGradientTape's local sources with broadcast gradients in a TF1 graph (issue 58).
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


def test_horovod_parity_last_mile(world_size: int, shared_launch) -> None:
    """Issue 52 (tests/programs/tensorflow_parity.py, whose docstring quotes Horovod's
    definitions), eagerly, in tf.function and in a tf.compat.v1 graph run by a Session:
    a stray second init() on one rank (hvdcore.tensorflow and the Keras modules) is local
    (horovod/common/basics.py ``HorovodBasics.init``); allreduce / grouped allreduce /
    reducescatter / grouped reducescatter equal Horovod's CPU arithmetic bit for bit
    (``AllreduceOp::ScaleBuffer``, horovod/common/ops/collective_operations.cc; factors are
    float32 op attributes, horovod/tensorflow/mpi_ops.cc), float16 prescale 0.1915194503788923
    as test_tensorflow.py's prescale test; every dtype of the ``REGISTER_OP`` attrs in
    horovod/tensorflow/mpi_ops.cc (uint16 and int16 included) through allgather, grouped
    allgather, broadcast, alltoall, allreduce, reducescatter and broadcast_variables against a
    one-process reference; unnamed collectives of different shapes and dtypes in one TF1 graph
    (names fixed when the graph is built); tf.IndexedSlices as horovod/tensorflow/__init__.py
    ``allreduce`` / ``grouped_allreduce`` (integer averages divided, NotImplementedError for
    other ops and for scale factors, no dense_shape, mixed with dense tensors); broadcast_ of
    resource variables in a TF1 graph (test_tensorflow.py
    ``test_horovod_broadcast_inplace_cpu``); broadcast_global_variables in a TF1 graph and its
    RuntimeError eagerly (horovod/tensorflow/__init__.py). Gloo plane: test_tensorflow_dlpack.py.
    (One launch with tensorflow_collectives.py: ``SHARED_LAUNCHES`` in conftest.py.)"""
    proc = shared_launch("tf", world_size)
    _assert_ok(proc, "TF-PARITY-OK", world_size)
    for name in ("recovers.stray_init", "prescale.float16.dim1.v1graph",
                 "dtype.uint16.alltoall.v1graph", "dtype.int16.broadcast.function",
                 "v1graph.unnamed.2", "indexed_slices.uint8.avg.v1graph",
                 "indexed_slices.refuses.adasum.grouped", "v1graph.broadcast_.variables",
                 "v1graph.broadcast_global_variables",
                 "eager.broadcast_global_variables.raises"):
        assert f"CHECK {name} ok" in proc.stdout, name


def test_model_parallel_local_sources_and_v1_broadcast_grad(world_size: int,
                                                            shared_launch) -> None:
    """Issue 58 (tests/programs/tensorflow_model_parallel.py): DistributedGradientTape's
    register_local_source, PartialDistributedGradientTape and get_local_and_global_gradients
    against Horovod 0.28.1's arithmetic (local gradients not reduced, divided by the set size
    unless scale_local_gradients=False), eagerly and in tf.function; test_tensorflow.py
    ``test_horovod_broadcast_grad_cpu`` in one TF1 graph for every root rank (it stalled:
    the ranks ran different broadcasts). (One launch: ``SHARED_LAUNCHES`` in conftest.py.)"""
    proc = shared_launch("tf", world_size)
    _assert_ok(proc, "TF-MODEL-PARALLEL-OK", world_size)
    for name in ("local_source.scaled.function.local_kept",
                 "local_source.unscaled.eager.indexed_slices_kept", "local_source.split.eager",
                 "partial_tape.local_layers", "local_source.refuses.register_local_source",
                 f"v1graph.broadcast_grad.float64.dim3.root{world_size - 1}"):
        assert f"CHECK {name} ok" in proc.stdout, name


@pytest.mark.parametrize("flavour", KERAS_FLAVOURS)
def test_keras_local_variables_config_and_saving(world_size: int, flavour: str,
                                                 shared_launch) -> None:
    """Keras API details users rely on, with Keras 3 and tf-keras (or TensorFlow's Keras 2).
    (One launch after tensorflow_keras_fit.py: ``SHARED_LAUNCHES`` in conftest.py.)"""
    proc = shared_launch("keras", world_size, flavour_env(flavour))
    _assert_ok(proc, f"KERAS-SEMANTICS-OK flavour={flavour}", world_size)
    assert f"CHECK {flavour}.save.h5.trains_on_in_sync ok" in proc.stdout


@pytest.mark.parametrize("flavour", KERAS_FLAVOURS)
def test_horovod_names_and_argument_orders(world_size: int, flavour: str,
                                           shared_launch) -> None:
    """Horovod 0.28.1's names and argument orders (tests/programs/tensorflow_api_parity.py,
    whose docstring quotes them): is_homogeneous, size_op / process_set_included_op of a set,
    the global set, an unknown and a removed id (eagerly, tf.function, TF1 graph);
    broadcast_object_fn; Keras allreduce / reducescatter with ``name`` second (a prescale
    factor and an op given by position act); Keras DistributedOptimizer refusing Adasum, Min,
    Max, Product with a ValueError when it is made; BroadcastGlobalVariablesCallback refusing
    non-variable local_variables (ValueError); BestModelCheckpoint in Horovod's order with the
    path by keyword or set before fit (rank 0 writes it). On each Keras flavour (their
    ModelCheckpoint and Callback differ). (One launch after tensorflow_keras_semantics.py:
    ``SHARED_LAUNCHES`` in conftest.py.)"""
    proc = shared_launch("keras", world_size, flavour_env(flavour))
    _assert_ok(proc, "TF-API-PARITY-OK", world_size)
    for name in ("included.unknown.v1graph", "broadcast_object_fn.call1",
                 "keras.allreduce.prescale", "keras.reducescatter.sum",
                 "optimizer.op.ADASUM.keras", "local_variables.ndarray", "best.positional",
                 "best.path_set_later"):
        assert f"CHECK {name} ok" in proc.stdout, name
    if world_size > 1:
        assert "CHECK included.member.v1graph ok" in proc.stdout


@pytest.mark.parametrize("flavour", KERAS_FLAVOURS)
def test_sync_batch_normalization(world_size: int, flavour: str, shared_launch) -> None:
    """``hvd.SyncBatchNormalization`` with Horovod's arithmetic (tests/programs/
    tensorflow_sync_bn.py): outputs, moving statistics and gradients equal one batch
    normalization over every rank's batch (eager, tf.function, 2-D and 4-D, channels last and
    first); unequal batches weigh each rank alike; compiled fit with DistributedOptimizer equals
    one-process training; fused=True refused; a saved model loads. (One launch after
    tensorflow_api_parity.py: ``SHARED_LAUNCHES`` in conftest.py.)"""
    proc = shared_launch("keras", world_size, flavour_env(flavour))
    _assert_ok(proc, f"TF-SYNC-BN-OK flavour={flavour}", world_size)
    for name in ("dense.eager.input_gradient", "nchw.eager.output", "nhwc.function.moving_variance",
                 "unequal.output", "inference.moving_statistics",
                 "fit.weights_and_moving_statistics_match_one_process", "fused_true.refused",
                 "saved.loads_without_custom_objects", "hvdcore_keras.same_layer"):
        assert f"CHECK {flavour}.{name} ok" in proc.stdout, name


def test_tf1_session_training(world_size: int, shared_launch) -> None:
    """TF1-style training (tests/programs/tensorflow_v1_training.py): a MonitoredTrainingSession
    with ``BroadcastGlobalVariablesHook(0)`` starts every rank from rank 0's values, and
    ``DistributedOptimizer`` of a ``tf.compat.v1.train`` optimizer (gradient descent, momentum
    and its slot, Adam; embedding gradients as IndexedSlices) trains as one process on the
    concatenated batches; with ``backward_passes_per_step`` N (summed or averaged) as one
    process stepping once per N runs, ``global_step`` counting every run; a
    ``register_local_var`` bias on each rank's own gradient; ``op=Adasum``'s delta optimizer as
    every rank's local steps combined with Horovod's Adasum arithmetic (refused at 3 ranks);
    N > 1 eagerly and N > 1 with IndexedSlices unless ``sparse_as_dense`` are refused. (One launch after
    tensorflow_parity.py: ``SHARED_LAUNCHES`` in conftest.py.)"""
    proc = shared_launch("tf", world_size)
    _assert_ok(proc, "TF-V1-TRAINING-OK", world_size)
    checks = 45 if world_size != 3 else 40  # (Adasum: trained at 1 and 2, refused at 3)
    for r in range(world_size):
        assert f"TF-V1-TRAINING-OK rank={r} size={world_size} checks={checks}" in proc.stdout
    for name in ("sgd.hook_gives_rank0_start", "sgd.w", "momentum.slot", "adam.w",
                 "sgd_embedding.table", "passes2_sgd.w", "passes2_sgd.global_step",
                 "passes3_adam_avg.w", "passes2_embedding.table", "local_scaled_1.b",
                 "local_unscaled_2.w", "refused.adasum_averaged", "refused.passes_eager",
                 "refused.passes_sparse",
                 *(("refused.adasum_ranks",) if world_size == 3 else
                   ("adasum_1.w", "adasum_2.w", "adasum_2.global_step"))):
        assert f"CHECK tfv1.{name} ok" in proc.stdout, name


def test_argument_errors_on_one_rank_fail_every_rank(world_size: int, shared_launch) -> None:
    """Bad arguments on rank 0 only (dtype, op, slices with Max, float splits, not a tensor, a
    complex variable), eagerly, in tf.function and in a TF1 graph: every rank raises (the
    others naming rank 0 and its reason) instead of waiting for the stall check, and the next
    collective works (tests/programs/tensorflow_one_rank_errors.py, in the "tf" launch)."""
    proc = shared_launch("tf", world_size)
    cases = 2 * 2 * (13 + (world_size >= 3)) + 2  # (eager, tf.function) x 2, then TF1 x 2
    _assert_ok(proc, "TF-ONE-RANK-ERRORS-OK rank=", world_size)
    for r in range(world_size):
        assert f"TF-ONE-RANK-ERRORS-OK rank={r} {cases}" in proc.stdout, proc.stdout[-3000:]
    for name in ("allreduce.sparse_max.function.2", "alltoall.float_splits.eager.1",
                 "broadcast_variables.dtype.function.2", "session.allreduce.2"):
        assert f"CHECK oneerr.{name} ok" in proc.stdout, name
