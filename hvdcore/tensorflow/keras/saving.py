"""``load_model`` and ``broadcast_global_variables`` for Keras training with hvdcore."""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from hvdcore.errors import ArgumentError
from hvdcore.tensorflow.compression import Compression, Compressor
from hvdcore.tensorflow.keras.callbacks import model_and_optimizer_variables
from hvdcore.tensorflow.keras.flavours import keras_major
from hvdcore.tensorflow.keras.optimizer import DistributedOptimizer, is_distributed_optimizer
from hvdcore.tensorflow.sync_batch_norm import sync_batch_normalization_class
from hvdcore.tensorflow.variables import broadcast_variables

__all__ = ["load_model", "broadcast_global_variables", "register_for_broadcast"]

_MODELS: list[Any] = []


def register_for_broadcast(model: Any) -> None:
    """Remember ``model`` for :func:`broadcast_global_variables` (load_model does this)."""
    if all(m is not model for m in _MODELS):
        _MODELS.append(model)


def load_model(filepath: str, custom_optimizers: list[type] | None = None,
               custom_objects: dict[str, Any] | None = None,
               compression: type[Compressor] = Compression.none, legacy_opts: bool = False,
               **optimizer_kwargs: Any) -> Any:
    """Load a saved Keras model with its optimizer wrapped in a DistributedOptimizer.

    A model saved with a DistributedOptimizer comes back with one (its reduction settings are
    in the saved config; ``compression`` is applied again). A model saved with a plain optimizer
    gets it wrapped, keeping the optimizer's state. ``hvd.SyncBatchNormalization`` layers load
    (saved here or on another Keras backend). ``optimizer_kwargs`` go to
    DistributedOptimizer (e.g. ``backward_passes_per_step``). ``legacy_opts`` (Horovod's fifth
    argument) has no effect: the optimizer the model comes back with is the one wrapped.

    Example: ``model = hvd.load_model("ckpt.keras"); model.fit(...)``.
    """
    objects = dict(custom_objects or {})
    for cls in custom_optimizers or []:
        objects[cls.__name__] = cls
    _register_saved_classes()
    model = tf.keras.models.load_model(filepath, custom_objects=objects or None)
    opt = getattr(model, "optimizer", None)
    if opt is not None:
        if is_distributed_optimizer(opt):
            opt.reducer.compression = compression
        else:
            model.optimizer = DistributedOptimizer(opt, compression=compression,
                                                   **optimizer_kwargs)
    register_for_broadcast(model)
    return model


def _register_saved_classes() -> None:
    """Register hvdcore's classes a saved model names with the Keras ``tf.keras`` is: both are
    made or imported on first use, and a fresh process that resumes from a checkpoint has used
    neither (it failed with "Could not locate class 'Keras3DistributedOptimizer'")."""
    sync_batch_normalization_class()
    if keras_major() >= 3 and not tf.keras.__name__.startswith("tf_keras"):
        import hvdcore.tensorflow.keras.optimizer_keras3  # noqa: F401 (registers the class)
    else:
        import hvdcore.tensorflow.keras.optimizer_tf_keras  # noqa: F401


def broadcast_global_variables(root_rank: int, model: Any = None) -> None:
    """Broadcast model and optimizer variables from ``root_rank`` to every rank.

    TensorFlow 2 has no global variable collection (Horovod's version needs a TF1 session),
    so hvdcore broadcasts ``model`` if given, else every model returned by
    :func:`load_model` or passed to :func:`register_for_broadcast` in this process.

    Example: ``hvd.broadcast_global_variables(0, model)``.
    """
    models = [model] if model is not None else list(_MODELS)
    if not models:
        raise ArgumentError(
            "broadcast_global_variables: TensorFlow 2 has no global variable collection; pass "
            "the model (broadcast_global_variables(0, model)) or use "
            "BroadcastGlobalVariablesCallback(0) in fit"
        )
    variables: list[Any] = []
    for m in models:
        variables += model_and_optimizer_variables(m)
    broadcast_variables(variables, root_rank)
