"""``load_model`` and ``broadcast_global_variables`` for Keras 3 off TensorFlow (torch)."""

from __future__ import annotations

from typing import Any

import keras

from hvdcore.errors import ArgumentError
from hvdcore.keras.optimizer import DistributedOptimizer, is_distributed_optimizer
from hvdcore.keras.portable_callbacks import model_and_optimizer_variables
from hvdcore.keras.routing import broadcast_variables

__all__ = ["load_model", "broadcast_global_variables", "register_for_broadcast"]

_MODELS: list[Any] = []


def register_for_broadcast(model: Any) -> None:
    """Remember ``model`` for :func:`broadcast_global_variables` (load_model does this)."""
    if all(m is not model for m in _MODELS):
        _MODELS.append(model)


def load_model(filepath: str, custom_optimizers: list[type] | None = None,
               custom_objects: dict[str, Any] | None = None, compression: Any = None,
               legacy_opts: bool = False, **optimizer_kwargs: Any) -> Any:
    """Load a saved Keras model with its optimizer wrapped in a DistributedOptimizer.

    A model saved with a DistributedOptimizer (on any backend) comes back with one;
    ``compression`` is applied again. A plain optimizer is wrapped, keeping its state;
    ``optimizer_kwargs`` go to DistributedOptimizer. ``legacy_opts`` (Horovod's fifth argument)
    has no effect: the optimizer the model comes back with is the one wrapped.

    Example: ``model = hvd.load_model("ckpt.keras"); model.fit(...)``.
    """
    objects = dict(custom_objects or {})
    for cls in custom_optimizers or []:
        objects[cls.__name__] = cls
    model = keras.models.load_model(filepath, custom_objects=objects or None)
    opt = getattr(model, "optimizer", None)
    if opt is not None:
        if is_distributed_optimizer(opt):
            if compression is not None:
                opt.reducer.compression = compression
        else:
            model.optimizer = DistributedOptimizer(opt, compression=compression,
                                                   **optimizer_kwargs)
    register_for_broadcast(model)
    return model


def broadcast_global_variables(root_rank: int, model: Any = None) -> None:
    """Broadcast model and optimizer variables from ``root_rank`` to every rank.

    Broadcasts ``model`` if given, else every model :func:`load_model` returned or
    :func:`register_for_broadcast` was given in this process.

    Example: ``hvd.broadcast_global_variables(0, model)``.
    """
    models = [model] if model is not None else list(_MODELS)
    if not models:
        raise ArgumentError("broadcast_global_variables: pass the model "
                            "(broadcast_global_variables(0, model)) or use "
                            "BroadcastGlobalVariablesCallback(0) in fit")
    variables: list[Any] = []
    for m in models:
        variables += model_and_optimizer_variables(m)
    broadcast_variables(variables, root_rank)
