"""Run a NumPy-level hvdcore call on TensorFlow tensors, eagerly or inside ``tf.function``.

Eager mode hands read-only views of the tensors' buffers to the core and gives the results
back without a copy where TensorFlow allows (:mod:`hvdcore.tensorflow.host_arrays`). In a graph
(``tf.function``, compiled ``model.fit``) the call becomes one ``tf.numpy_function`` op whose
outputs get the static shapes the caller declares. Such ops are stateful, so ``tf.function``'s
automatic control dependencies keep them in program order: every rank runs its collectives in the
same order, which is what the core's automatic naming needs. XLA cannot run Python callbacks, so a
collective traced under ``jit_compile=True`` is a clear error instead of a crash.

With a torch data plane up (:mod:`hvdcore.tensorflow.device_path`), inputs that a plane takes
go to it through DLPack instead of host memory, eagerly and, through ``tf.py_function``, in a
graph; results come back the same way.

Errors take Horovod's TensorFlow types (see :mod:`hvdcore.tensorflow.errors`): a negotiation
failure is a ``tf.errors.FailedPreconditionError``, a bad argument a
``tf.errors.InvalidArgumentError``, eagerly and inside ``tf.function``.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from hvdcore.errors import ArgumentError, MismatchError, UnsupportedError
from hvdcore.tensorflow import device_path
from hvdcore.tensorflow.errors import to_tf_error
from hvdcore.tensorflow.host_arrays import host_view, to_eager

__all__ = ["SUPPORTED_DTYPES", "check_dtype", "run_numpy", "to_tensor"]

SUPPORTED_DTYPES = (
    tf.uint8, tf.int8, tf.uint16, tf.int16, tf.int32, tf.int64, tf.float16, tf.float32,
    tf.float64, tf.bool,
)

# dtypes the core has no buffer type for: they travel as int32 (exact for moves; a reduction
# wraps back into the dtype, as TensorFlow's cast does) and come back in their own dtype
_WIDENED = {tf.int16: tf.int32, tf.uint16: tf.int32}


def check_dtype(tensor: tf.Tensor, what: str) -> None:
    """Raise ArgumentError if the core cannot move ``tensor``'s dtype."""
    if tensor.dtype not in SUPPORTED_DTYPES:
        names = ", ".join(d.name for d in SUPPORTED_DTYPES)
        raise ArgumentError(
            f"{what}: dtype {tensor.dtype.name} is not supported (supported: {names}); "
            f"cast it first, e.g. tf.cast(t, tf.float32)"
        )


def to_tensor(value: object) -> tf.Tensor:
    """A tf.Tensor for a tensor, tf.Variable, Keras variable or array-like."""
    if isinstance(value, tf.Tensor):
        return value
    if isinstance(value, tf.Variable):
        return value.read_value() if not tf.executing_eagerly() else tf.convert_to_tensor(value)
    inner = getattr(value, "value", None)  # Keras 3 Variable -> its tf.Variable
    if isinstance(inner, tf.Variable):
        return tf.convert_to_tensor(inner)
    return tf.convert_to_tensor(value)


def _in_xla_context() -> bool:
    try:
        from tensorflow.python.framework import ops as tf_ops
        from tensorflow.python.ops import control_flow_util
    except ImportError:  # layout of TF internals changed: assume no XLA
        return False
    return bool(control_flow_util.GraphOrParentsInXlaContext(tf_ops.get_default_graph()))


def _eager(call: Callable[..., Any], args: Sequence[Any]) -> Any:
    """``call(*args)``, an hvdcore error re-raised as the TensorFlow error Horovod raises."""
    try:
        return call(*args)
    except Exception as exc:  # noqa: BLE001  (re-raised, typed as Horovod's TF error)
        typed = to_tf_error(exc)
        if typed is None:
            raise
        raise typed from exc


def _refuse_xla(name: str) -> None:
    if _in_xla_context():
        raise UnsupportedError(
            f"hvdcore collective '{name}' was traced inside an XLA-compiled function: XLA "
            "cannot call into the MPI runtime. Pass jit_compile=False to model.compile(...) "
            "or tf.function(...).")


def _graph_outputs(raw: Any, out_shapes: Sequence[tf.TensorShape | list | None]
                   ) -> list[tf.Tensor]:
    """The outputs of a py op whose last output is the failure message: they depend on the
    check that raises it, and get the static shapes that are known."""
    raw = list(raw) if isinstance(raw, (list, tuple)) else [raw]
    failed = _raise_failed(raw[-1])
    with tf.control_dependencies([failed]):
        tensors = [tf.identity(t) for t in raw[:-1]]
    for out, shape in zip(tensors, out_shapes, strict=True):
        if shape is not None:
            out.set_shape(shape)
    return tensors


def run_numpy(
    fn: Callable[..., Sequence[np.ndarray]],
    inputs: Sequence[tf.Tensor],
    out_dtypes: Sequence[tf.DType],
    out_shapes: Sequence[tf.TensorShape | list | None],
    name: str,
    plane_inputs: int = 0,
    ordered: bool = True,
) -> list[tf.Tensor]:
    """Call ``fn(*arrays) -> arrays`` on ``inputs``; return tensors of ``out_dtypes``.

    ``out_shapes`` are the static shapes set on the outputs in graph mode (None entries are
    unknown dimensions). ``plane_inputs``: how many leading inputs ``fn`` only passes to the
    core (so they may be a torch plane's buffers instead of arrays, see
    :mod:`~hvdcore.tensorflow.device_path`); its results for them are then torch tensors.
    ``ordered=False``: in a TF1-style graph, outside the build-order chain (see
    :func:`_in_build_order`), for ops run on their own, such as a broadcast of the initial
    variables built after the training ops (which would otherwise make it run them too).
    """
    if any(t.dtype in _WIDENED for t in inputs) or any(d in _WIDENED for d in out_dtypes):
        wide = run_numpy(fn, [tf.cast(t, _WIDENED[t.dtype]) if t.dtype in _WIDENED else t
                              for t in inputs],
                         [_WIDENED.get(d, d) for d in out_dtypes], out_shapes, name,
                         plane_inputs, ordered)
        return [tf.cast(o, d) if o.dtype != d else o
                for o, d in zip(wide, out_dtypes, strict=True)]
    if plane_inputs and device_path.active():
        return _run_on_planes(fn, inputs, out_dtypes, out_shapes, name, plane_inputs, ordered)
    np_dtypes = [d.as_numpy_dtype for d in out_dtypes]

    def call(*arrays: np.ndarray) -> list[np.ndarray]:
        outs = fn(*arrays)
        arrays_out = [np.asarray(o, dtype=d) for o, d in zip(outs, np_dtypes, strict=True)]
        # np.ascontiguousarray would turn 0-d results into 1-d ones
        return [a if a.flags.c_contiguous else a.copy(order="C") for a in arrays_out]

    if tf.executing_eagerly():
        outs = _eager(call, [host_view(t) for t in inputs])
        return [to_eager(o) for o in outs]
    _refuse_xla(name)

    def call_in_graph(*arrays: np.ndarray) -> list[np.ndarray]:
        # TensorFlow turns a Python exception in a py op into UNKNOWN (ValueError into
        # INVALID_ARGUMENT): a mismatch is handed out as a message and raised by _raise_failed
        try:
            return [*call(*arrays), np.asarray(b"")]
        except MismatchError as exc:
            message = f"{type(exc).__name__}: {exc}".encode()
            return [*_placeholders(np_dtypes, out_shapes), np.asarray(message)]

    with _in_build_order(ordered):
        raw = tf.numpy_function(call_in_graph, list(inputs), [*out_dtypes, tf.string],
                                stateful=True, name=_op_name(name))
        _built(raw, ordered)
    return _graph_outputs(raw, out_shapes)


def _run_on_planes(
    fn: Callable[..., Sequence[object]],
    inputs: Sequence[tf.Tensor],
    out_dtypes: Sequence[tf.DType],
    out_shapes: Sequence[tf.TensorShape | list | None],
    name: str,
    plane_inputs: int,
    ordered: bool = True,
) -> list[tf.Tensor]:
    """:func:`run_numpy` with the leading inputs on a torch plane (through DLPack)."""
    def call(*tensors: tf.Tensor) -> list[tf.Tensor]:
        args = [device_path.to_core(t) if i < plane_inputs else t.numpy()
                for i, t in enumerate(tensors)]
        outs = fn(*args)
        return [device_path.to_tf(o, d) for o, d in zip(outs, out_dtypes, strict=True)]

    if tf.executing_eagerly():
        return _eager(call, inputs)
    _refuse_xla(name)
    np_dtypes = [d.as_numpy_dtype for d in out_dtypes]

    def call_in_graph(*tensors: tf.Tensor) -> list[object]:
        try:
            return [*call(*tensors), tf.constant(b"")]
        except MismatchError as exc:  # handed out as a message, as in run_numpy
            message = f"{type(exc).__name__}: {exc}".encode()
            return [*_placeholders(np_dtypes, out_shapes), tf.constant(message)]

    with _in_build_order(ordered):
        raw = tf.py_function(call_in_graph, list(inputs), [*out_dtypes, tf.string],
                             name=_op_name(name))
        _built(raw, ordered)
    return _graph_outputs(raw, out_shapes)


# The last hvdcore op built in each TF1-style graph (and its control-flow context)
_LAST_OP: weakref.WeakKeyDictionary[Any, tuple[Any, Any]] = weakref.WeakKeyDictionary()


def _session_graph() -> Any:
    """The TF1-style graph being built (``tf.compat.v1``, run by a Session), else None."""
    if tf.executing_eagerly() or tf.inside_function():
        return None
    return tf.compat.v1.get_default_graph()


@contextlib.contextmanager
def _in_build_order(ordered: bool = True) -> Iterator[None]:
    """In a TF1-style graph, make the op built next run after the hvdcore op built before it.

    A Session runs independent ops in its own order, on threads of its own: two ranks could
    each block one thread in a different collective and wait on each other for ever (Horovod's
    kernels are asynchronous and do not hold a thread). Chained in build order, every rank
    runs its collectives in the same order, as ``tf.function``'s automatic control
    dependencies do; ops in another control-flow context (a while loop body) start a new
    chain, since TensorFlow forbids control edges across those.
    """
    graph = _session_graph() if ordered else None
    last = _LAST_OP.get(graph) if graph is not None else None
    if graph is None or last is None or last[1] is not graph._get_control_flow_context():
        yield
        return
    with tf.control_dependencies([last[0]]):
        yield


def _built(raw: Any, ordered: bool = True) -> None:
    graph = _session_graph() if ordered else None
    if graph is not None:
        op = (raw[0] if isinstance(raw, (list, tuple)) else raw).op
        _LAST_OP[graph] = (op, graph._get_control_flow_context())  # noqa: SLF001


def _placeholders(np_dtypes: Sequence[np.dtype],
                  out_shapes: Sequence[tf.TensorShape | list | None]) -> list[np.ndarray]:
    """Empty stand-in outputs for a failed op (never read: _raise_failed runs first)."""
    outs = []
    for dtype, shape in zip(np_dtypes, out_shapes, strict=True):
        dims = tf.TensorShape(shape).as_list() if shape is not None else None
        dims = [0] if dims is None else [0 if d is None else d for d in dims]
        outs.append(np.zeros(dims, dtype=dtype))
    return outs


def _raise_failed(message: tf.Tensor) -> tf.Tensor:
    """Fail with FAILED_PRECONDITION carrying ``message`` when it is not empty.

    No stock TensorFlow op fails with FAILED_PRECONDITION and a message chosen at run time, and a
    py op cannot pick its error code; a file lookup below /dev/null (not a directory: ENOTDIR)
    does, with the path, i.e. the message, in the error text.
    """
    def fail() -> tf.Tensor:
        text = tf.strings.substr(message, 0, 3000)  # stay below PATH_MAX
        return tf.io.read_file(tf.strings.join(["/dev/null/hvdcore ", text, " "]))

    return tf.cond(tf.equal(message, ""), lambda: tf.constant(""), fail)


def _op_name(name: str) -> str:
    cleaned = "".join(c if c.isalnum() or c in "_-." else "_" for c in name)
    return ("Hvd" + cleaned)[:64]
