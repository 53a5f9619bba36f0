"""Broadcast variables from one rank, with a check that every rank has the same variables.

Before any data moves, the ranks compare the list of (shape, dtype) of the variables being
broadcast. A rank whose model differs (another layer size, a missing layer) gets a
:class:`~hvdcore.errors.MismatchError` on every rank that names the first differing variable,
instead of a hang or a silently wrong model.

Example::

    import hvdcore.tensorflow as hvd
    hvd.init()
    hvd.broadcast_variables(model.variables, root_rank=0)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

import hvdcore as _core
from hvdcore import global_process_set
from hvdcore.engine.messages import ALLGATHER
from hvdcore.errors import MismatchError
from hvdcore.tensorflow.bridge import check_dtype, run_numpy, to_tensor
from hvdcore.tensorflow.op_building import build_name
from hvdcore.tensorflow.rejection import Take, announcing

__all__ = ["broadcast_variables", "broadcast_global_variables", "check_same_variables"]


def _var_name(v: Any, i: int) -> str:
    return str(getattr(v, "path", None) or getattr(v, "name", None) or f"#{i}")


def check_same_variables(signature: list[tuple[str, tuple[int, ...], str]], root_rank: int,
                         process_set: Any = global_process_set, what: str = "broadcast",
                         name: str | None = None) -> None:
    """Raise MismatchError (on every rank) unless all ranks pass the same shapes and dtypes.

    ``signature`` is this rank's list of ``(name, shape, dtype)``; names are only used in the
    message (Keras may number layers differently per rank).
    """
    everyone = _core.allgather_object(signature, name=name, process_set=process_set)
    ranks = list(process_set.ranks) if process_set.ranks else list(range(_core.size()))
    root_sig = everyone[ranks.index(root_rank)] if root_rank in ranks else everyone[0]
    for member, sig in zip(ranks, everyone, strict=False):
        if [s[1:] for s in sig] == [s[1:] for s in root_sig]:
            continue
        if len(sig) != len(root_sig):
            detail = f"rank {member} has {len(sig)} variables, root rank {root_rank} has " \
                     f"{len(root_sig)}"
        else:
            detail = ""
        for i, (mine, theirs) in enumerate(zip(sig, root_sig, strict=False)):
            if mine[1:] != theirs[1:]:
                detail = (detail + "; " if detail else "") + (
                    f"variable #{i}: rank {member} has '{mine[0]}' shape {list(mine[1])} "
                    f"{mine[2]}, root rank {root_rank} has '{theirs[0]}' shape "
                    f"{list(theirs[1])} {theirs[2]}"
                )
                break
        raise MismatchError(
            f"{what} from root rank {root_rank}: the ranks do not have the same variables "
            f"({detail}). Build the same model on every rank before broadcasting."
        )


def variables_plan(args: Mapping[str, Any], take: Take) -> tuple[str, list[str]]:
    """The other ranks' first request of a variables broadcast: the allgather of the sizes of
    their variable lists' pickles (:func:`check_same_variables`)."""
    name = args.get("name")
    base = take("allgather_object", f"{name}.check" if name else None)
    return ALLGATHER, [f"{base}.size"]


@announcing(variables_plan)
def broadcast_variables(variables: Sequence[Any], root_rank: int,
                        process_set: Any = global_process_set, inplace: bool = False,
                        name: str | None = None) -> Any:
    """Assign ``root_rank``'s values to ``variables`` on every rank of ``process_set``.

    Works on tf.Variable and Keras 3 / tf-keras variables, eagerly and inside ``tf.function``
    (returns None; there the assignments are ordered by tf.function's automatic control
    dependencies), and in a TF1-style graph, where, as in Horovod, it returns the op that
    broadcasts and assigns (run it with ``session.run``). ``inplace`` is accepted for Horovod
    compatibility; assignment is always in place.
    """
    var_list = list(variables)
    values = [to_tensor(v) for v in var_list]
    for v in values:
        check_dtype(v, "broadcast_variables")
    signature = [(_var_name(v, i), tuple(t.shape.as_list()), t.dtype.name)
                 for i, (v, t) in enumerate(zip(var_list, values, strict=False))]
    session_graph = not tf.executing_eagerly() and not tf.inside_function()
    name = build_name("broadcast_variables", name)  # (fixed now in a TF1-style graph)

    def fn(*arrays: np.ndarray) -> list[np.ndarray]:
        check_same_variables(signature, root_rank, process_set, "broadcast_variables",
                             name=f"{name}.check" if name else None)
        return [_core.broadcast(a, root_rank, name=f"{name}.{i}" if name else None,
                                process_set=process_set) for i, a in enumerate(arrays)]

    # (ordered=False: a broadcast of the initial variables, built after the training ops, is
    # run on its own; in the build-order chain it would run those ops, and need their feeds)
    outs = run_numpy(fn, values, [t.dtype for t in values], [t.shape for t in values],
                     "broadcast_variables", ordered=False)
    assigns = [v.assign(o) for v, o in zip(var_list, outs, strict=True)]
    # (in tf.function the assignments run anyway, and a function may not return an op)
    return tf.group(*assigns) if session_graph else None


def broadcast_global_variables(root_rank: int) -> Any:
    """The op that broadcasts every global variable of a TF1-style graph from ``root_rank``
    (``tf.compat.v1.global_variables()``); run it in the Session after initialising them.

    As in Horovod (``horovod/tensorflow/__init__.py``), eager mode has no global variable
    collection: a RuntimeError says to broadcast the model's variables instead. (The Keras
    modules' ``broadcast_global_variables(root_rank, model=None)`` is the Keras form.)

    Example::

        bcast = hvd.broadcast_global_variables(0)
        sess.run(tf.compat.v1.global_variables_initializer()); sess.run(bcast)
    """
    if tf.executing_eagerly():
        raise RuntimeError(
            "hvd.broadcast_global_variables() needs a TF1-style graph (there are no global "
            "variables in eager mode); use hvd.broadcast_variables(model.variables, "
            "root_rank) instead")
    return broadcast_variables(tf.compat.v1.global_variables(), root_rank)
