"""The broadcasts: ``broadcast`` (with its gradient), the in-place ``broadcast_`` of variables,
``broadcast_object`` and ``broadcast_object_fn``.

Part of :mod:`hvdcore.tensorflow.collectives` (its docstring has the rules they share).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import tensorflow as tf

import hvdcore as _core
from hvdcore import Average, global_process_set
from hvdcore.engine.messages import BROADCAST
from hvdcore.tensorflow.bridge import check_dtype, run_numpy, to_tensor
from hvdcore.tensorflow.op_building import _grad_name, _label, build_name
from hvdcore.tensorflow.reduce_ops import _dense_allreduce
from hvdcore.tensorflow.rejection import announcing, plain
from hvdcore.tensorflow.variables import variables_plan

__all__ = ["broadcast", "broadcast_", "broadcast_object", "broadcast_object_fn"]


def _raw_broadcast(t: tf.Tensor, root_rank: int, name: str | None, process_set: Any) -> tf.Tensor:
    check_dtype(t, "broadcast")

    def fn(a: np.ndarray) -> list[np.ndarray]:
        return [_core.broadcast(a, root_rank, name=name, process_set=process_set)]

    return run_numpy(fn, [t], [t.dtype], [t.shape], _label("broadcast", name),
                     plane_inputs=1)[0]


@announcing(plain(BROADCAST))
def broadcast(tensor: Any, root_rank: int, name: str | None = None,
              ignore_name_scope: bool = False,
              process_set: Any = global_process_set) -> tf.Tensor:
    """Every rank receives ``root_rank``'s ``tensor`` (same shape and dtype on every rank).

    Example: ``w = hvd.broadcast(w, root_rank=0)``.
    """
    t = to_tensor(tensor)
    name = build_name("broadcast", name)
    if not t.dtype.is_floating:
        return _raw_broadcast(t, root_rank, name, process_set)

    @tf.custom_gradient
    def bcast(x: tf.Tensor) -> Any:
        y = _raw_broadcast(x, root_rank, name, process_set)

        def grad(dy: tf.Tensor) -> tf.Tensor:
            averaged = _dense_allreduce(dy, Average, 1.0, 1.0, _grad_name("broadcast", name),
                                        process_set)
            if _core.rank() == root_rank:
                return averaged
            # Times zero as Horovod, not zeros_like: in a TF1 graph zeros_like of a known
            # shape is a constant, so a Session on the other ranks would skip the allreduce
            # (and the forward broadcast it follows) that the root waits on.
            return averaged * tf.zeros([], averaged.dtype)

        return y, grad

    return bcast(t)


@announcing(variables_plan)
def broadcast_(variables: Any, root_rank: int, name: str | None = None,
               process_set: Any = global_process_set) -> Any:
    """In-place broadcast: assign ``root_rank``'s values to ``variables`` (one or a list).

    Returns, as Horovod does, the variables' values read after the assignment (a list for a
    list, one tensor for one variable): in a TF1-style graph, running them runs the
    broadcast and the assignments.

    Example: ``hvd.broadcast_(model.variables, root_rank=0)``.
    """
    from hvdcore.tensorflow.variables import broadcast_variables

    single = not isinstance(variables, (list, tuple))
    var_list = [variables] if single else list(variables)
    assigned = broadcast_variables(var_list, root_rank, process_set=process_set,
                                   name=build_name("broadcast_", name))
    deps = [] if assigned is None else [assigned]
    with tf.control_dependencies(deps):
        values = [tf.identity(_read(v)) for v in var_list]
    return values[0] if single else values


def _read(variable: Any) -> tf.Tensor:
    """The current value of a tf.Variable (or a Keras variable's)."""
    inner = getattr(variable, "value", None)
    if not isinstance(variable, tf.Variable) and isinstance(inner, tf.Variable):
        variable = inner
    return variable.read_value() if isinstance(variable, tf.Variable) else tf.identity(variable)


def broadcast_object(obj: Any, root_rank: int = 0, session: Any = None, name: str | None = None,
                     process_set: Any = global_process_set) -> Any:
    """Pickle ``obj`` on ``root_rank`` and return it on every rank (eager only)."""
    return _core.broadcast_object(obj, root_rank=root_rank, name=name, process_set=process_set)


def broadcast_object_fn(root_rank: int = 0, session: Any = None, name: str | None = None,
                        process_set: Any = global_process_set) -> Callable[[Any], Any]:
    """A function ``fn(obj)`` that returns ``root_rank``'s ``obj`` on every rank, each call a
    :func:`broadcast_object` named ``name`` (default ``"broadcast_object_fn"``).

    Horovod builds it from placeholders for TF1 sessions; hvdcore broadcasts on the host, so
    it works eagerly and in graph mode alike (``session`` is accepted and unused).

    Example: ``bcast = hvd.broadcast_object_fn(root_rank=0); config = bcast(config)``.
    """
    label = name or "broadcast_object_fn"

    def bcast(obj: Any) -> Any:
        return _core.broadcast_object(obj, root_rank=root_rank, name=label,
                                      process_set=process_set)

    return bcast
