"""hvdcore errors as the ``tf.errors`` types Horovod's TensorFlow ops raise.

Each class derives from both the TensorFlow error and the hvdcore error, so
``except tf.errors.FailedPreconditionError`` (Horovod code) and ``except MismatchError`` (hvdcore
code) both catch a negotiation failure, and ``except ValueError`` still catches a bad argument.

Example::

    try:
        hvd.allreduce(tf.ones([2 + hvd.rank()]))
    except tf.errors.FailedPreconditionError as exc:   # ranks disagreed on the shape
        print(exc.message)
"""

from __future__ import annotations

import tensorflow as tf

from hvdcore import errors as core_errors

__all__ = ["MismatchError", "ArgumentError", "to_tf_error"]


class MismatchError(tf.errors.FailedPreconditionError, core_errors.MismatchError):
    """Ranks disagreed on a collective (Horovod: ``tf.errors.FailedPreconditionError``)."""

    def __init__(self, message: str) -> None:
        tf.errors.FailedPreconditionError.__init__(self, None, None, message)
        self.args = (message,)


class ArgumentError(tf.errors.InvalidArgumentError, core_errors.ArgumentError):
    """A bad argument, e.g. alltoall splits (Horovod: ``tf.errors.InvalidArgumentError``)."""

    def __init__(self, message: str) -> None:
        tf.errors.InvalidArgumentError.__init__(self, None, None, message)
        self.args = (message,)


def to_tf_error(exc: BaseException) -> BaseException | None:
    """The TensorFlow-typed error for an hvdcore error, or None if it keeps its type."""
    if isinstance(exc, tf.errors.OpError):
        return None
    if isinstance(exc, core_errors.MismatchError):
        return MismatchError(str(exc))
    if isinstance(exc, core_errors.ArgumentError):
        return ArgumentError(str(exc))
    return None
