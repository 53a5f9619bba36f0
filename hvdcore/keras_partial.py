"""``PartialDistributedOptimizer``'s rule, shared by both Keras bindings: the weights of
``local_layers`` keep local gradients."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hvdcore.errors import ArgumentError

__all__ = ["as_list", "partial_optimizer"]


def as_list(value: Any) -> list[Any]:
    """``None`` -> [], a list, tuple or set -> a list, anything else -> [value]."""
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple, set)) else [value]


def partial_optimizer(make: Callable[[], Any], local_layers: Any) -> Any:
    """``make()`` (a DistributedOptimizer) with every trainable weight of ``local_layers``
    (a Keras layer or a list) registered with ``register_local_var``; anything but layers is
    refused before the optimizer is made."""
    layers = as_list(local_layers)
    for layer in layers:
        if not hasattr(layer, "trainable_weights") or not hasattr(layer, "built"):
            raise ArgumentError(f"local_layers must be Keras layers, got {type(layer).__name__}")
    opt = make()
    for layer in layers:
        for var in layer.trainable_weights:
            opt.register_local_var(var)
    return opt
