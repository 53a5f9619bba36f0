"""What every TensorFlow collective needs while its op is built, eager or in a graph.

The static shape of a result (known, or with an unknown first dimension), the op's label and
name (fixed when a TF1-style graph is built, see :func:`build_name`; the name of a gradient's
collective), a scale factor as Horovod's float32 op attribute (:func:`op_factor`), and whether
an eager call can skip its custom gradient (no tape watches the inputs).
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import tensorflow as tf

__all__ = ["build_name", "op_factor", "built_names"]


class _BuiltNames(threading.local):
    count = 0  # names this thread fixed with build_name
    last: str | None = None


built_names = _BuiltNames()
"""The calling thread's names fixed by :func:`build_name` (``count``, and the ``last`` one):
a failed call finds the name its op was given (:mod:`hvdcore.tensorflow.rejection`)."""


def _shape(t: tf.Tensor) -> tf.TensorShape:
    return t.shape


def _first_dim_unknown(t: tf.Tensor) -> tf.TensorShape:
    if t.shape.rank is None:
        return tf.TensorShape(None)
    if t.shape.rank == 0:
        return tf.TensorShape([None])
    return tf.TensorShape([None]).concatenate(t.shape[1:])


def _label(kind: str, name: str | None) -> str:
    return f"{kind}.{name}" if name else kind


def _in_session_graph() -> bool:
    """True while a TF1-style graph (``tf.compat.v1``, run by a Session) is being built."""
    return not tf.executing_eagerly() and not tf.inside_function()


def build_name(kind: str, name: str | None) -> str | None:
    """``name``; in a TF1-style graph, when it is None, a name fixed now, while the graph is
    built (unique in the graph, the same on every rank that builds the same graph).

    A Session runs independent ops in its own order on each rank, so names given when the
    ops run (the core's automatic ``kind#N``) would pair different collectives across ranks;
    Horovod names each op after its graph node for the same reason. Eager code and
    ``tf.function`` (whose automatic control dependencies keep program order) keep the core's
    run-time names.
    """
    if name is not None or not _in_session_graph():
        return name
    built = tf.compat.v1.get_default_graph().unique_name(f"hvdcore.{kind}", mark_as_used=True)
    built_names.count += 1
    built_names.last = built
    return built


def _grad_name(kind: str, name: str | None) -> str | None:
    """The name of a gradient's collective: fixed at build time in a TF1-style graph (each
    ``tf.gradients`` call builds its own ops), else derived from the forward op's name."""
    if _in_session_graph():
        return build_name(f"{kind}.grad", None)
    return f"{name}.grad" if name else None


def op_factor(value: Any) -> Any:
    """A prescale/postscale factor as Horovod's TensorFlow ops hold it: a float32 op attribute
    (``horovod/tensorflow/mpi_ops.cc``, "Using float since TF does not support double OP
    attributes"), widened to float64 by the core. Non-numbers pass through to be rejected."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        return value
    return float(np.float32(value))


try:  # TensorFlow's own test for "would any tape or forward accumulator record these?"
    from tensorflow.python import pywrap_tfe as _pywrap_tfe

    _possible_gradient_types = _pywrap_tfe.TFE_Py_TapeSetPossibleGradientTypes
except (ImportError, AttributeError):  # another TensorFlow layout: always record
    _possible_gradient_types = None


def _may_need_gradient(tensors: list[tf.Tensor]) -> bool:
    """False only in eager mode when no gradient tape or forward accumulator watches any of
    ``tensors``: the custom gradient can then be skipped (it costs ~70 us per eager call,
    more than the allreduce it wraps). Graph mode always keeps it (``tf.gradients`` needs
    no tape)."""
    if _possible_gradient_types is None or not tf.executing_eagerly():
        return True
    try:
        return bool(_possible_gradient_types(tensors))
    except Exception:  # noqa: BLE001 - unknown input types: keep the gradient
        return True
