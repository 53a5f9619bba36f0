"""What every non-TensorFlow backend's gradient reducer shares: checks, scales and names.

:class:`GradientReducer` validates the DistributedOptimizer options once (op, predivide factor,
compression) and derives, for each call, Horovod's predivide split and a stable request name
(so the core's response cache serves every step after the first). The backends' subclasses
(:mod:`hvdcore.keras.torch_ops`, :mod:`hvdcore.keras.jax_ops`) move the tensors.
"""

from __future__ import annotations

import zlib
from typing import Any

from hvdcore import Adasum, Average, ReduceOp, Sum, global_process_set
from hvdcore.arguments import resolve_op
from hvdcore.errors import ArgumentError

__all__ = ["GradientReducer"]


class GradientReducer:
    """Options of a reduction of a list of gradients (None entries stay None) over a set.

    ``gradient_predivide_factor`` f (op Average only) splits the averaging as Horovod does:
    times 1/f before the sum, times f/size after it.
    """

    #: the ops this backend can reduce gradients with
    OPS: tuple[ReduceOp, ...] = (Average, Sum, Adasum)
    #: the backend's name, for error messages
    BACKEND = ""

    def __init__(self, op: Any = Average, compression: Any = None,
                 sparse_as_dense: bool = False, gradient_predivide_factor: float = 1.0,
                 process_set: Any = global_process_set) -> None:
        self.op = resolve_op(None, op, "DistributedOptimizer")
        if gradient_predivide_factor != 1.0 and self.op != Average:
            raise ArgumentError(f"gradient_predivide_factor={gradient_predivide_factor} needs "
                                f"op=Average, got op={self.op.name}")
        if self.op not in self.OPS:
            raise ArgumentError(f"gradients can be reduced with "
                                f"{' or '.join(o.name for o in self.OPS)} on Keras' "
                                f"{self.BACKEND} backend, not {self.op.name}")
        if not (isinstance(compression, type) and hasattr(compression, "compress")):
            raise ArgumentError(f"compression must be hvdcore.keras.Compression.none or .fp16 "
                                f"({self.BACKEND} backend), got {compression!r}")
        self.compression: Any = compression  # a compressor class (compress/decompress)
        self.sparse_as_dense = sparse_as_dense
        self.gradient_predivide_factor = float(gradient_predivide_factor)
        self.process_set = process_set
        self._names: dict[tuple, str] = {}

    def name_for(self, signature: tuple, op: ReduceOp, pre: float, post: float) -> str:
        """A request name that is the same for the same op, scales, dtypes and shapes."""
        key = (int(op), pre, post, *signature)
        name = self._names.get(key)
        if name is None:
            if len(self._names) >= 64:
                self._names.clear()
            name = self._names[key] = f"keras.gradients.{zlib.crc32(repr(key).encode()):08x}"
        return name

    def scales(self) -> tuple[ReduceOp, float, float]:
        """``(op, prescale, postscale)`` to submit, with Horovod's predivide split."""
        f = self.gradient_predivide_factor
        if self.op == Average and f != 1.0:
            return Sum, 1.0 / f, f / self.process_set.size()
        return self.op, 1.0, 1.0

    def divided_by_size(self, grads: list[Any]) -> list[Any]:
        """Each gradient divided by the process set's size (``scale_local_gradients``), the
        size the step runs at: a backend that traces its step reads it at run time."""
        n = self.process_set.size()
        return [g / n for g in grads]
