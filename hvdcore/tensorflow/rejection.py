"""A TensorFlow collective whose checks fail on one rank fails on every rank, not only there.

The TensorFlow binding checks a call before any op runs: the tensor converts, its dtype is one
the core moves, the op is known, ``tf.IndexedSlices`` take Sum or Average, the splits cast.
These checks run eagerly, while a ``tf.function`` is traced, and while a TF1-style graph is
built. A failure on some ranks only used to leave the others waiting in the collective until
the stall check ended the job. :func:`announcing` wraps each public collective: when it raises
before reaching the core, this rank announces the rejection under the request names the other
ranks' matching call takes (the torch binding does the same, :func:`hvdcore.collectives
.rejecting`), so that call fails on them with this rank's reason, and the runtime goes on.

The names must be the ones the other ranks use: a call's own ``name``; in a TF1-style graph the
name fixed while the op was built (:func:`~hvdcore.tensorflow.op_building.build_name`); else the
next automatic name, which the other ranks take when their op runs (eager calls, and
``tf.function``, whose ops run in program order). A :data:`Plan` says, for a call's
arguments, which request the other ranks submit first (an ``IndexedSlices`` allreduce starts
with the allgather of its values).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import tensorflow as tf

from hvdcore import basics, errors
from hvdcore.arguments import part_names, process_set_id
from hvdcore.engine import requests
from hvdcore.process_sets import global_process_set
from hvdcore.tensorflow.op_building import _in_session_graph, build_name, built_names

__all__ = ["Plan", "Take", "announcing", "plain", "announce"]

_F = TypeVar("_F", bound=Callable[..., Any])

Take = Callable[[str, "str | None"], str]
"""``take(counter, name)``: ``name``, or the next automatic name of ``counter`` (a request
kind, or ``"allgather_object"``), counted as the core counts it."""

Plan = Callable[[Mapping[str, Any], Take], "tuple[str, list[str]]"]
"""``plan(arguments, take) -> (kind, names)``: the request kind and names the other ranks'
matching call submits first, for a call's bound arguments (``name`` already resolved)."""


def _count(tensors: Any) -> int:
    try:
        return max(len(tensors), 1)
    except TypeError:
        return 1


def plain(kind: str, grouped: bool = False) -> Plan:
    """The plan of a call that submits one ``kind`` request under its own name (one part per
    tensor of a grouped call, whose first argument is ``tensors``)."""
    def plan(args: Mapping[str, Any], take: Take) -> tuple[str, list[str]]:
        base = take(kind, args.get("name"))
        return kind, part_names(base, _count(args.get("tensors")) if grouped else 1)
    return plan


def _herald(exc: BaseException) -> BaseException:
    """What the other ranks are told: TensorFlow's own argument errors as hvdcore's, so that
    they raise the same kind of error (a ValueError or TypeError), not an internal one."""
    if isinstance(exc, tf.errors.InvalidArgumentError) and not isinstance(exc, ValueError):
        return errors.ArgumentError(str(exc))
    if isinstance(exc, tf.errors.UnimplementedError):
        return errors.UnsupportedError(str(exc))
    return exc


def announce(exc: BaseException, plan: Plan, args: Mapping[str, Any], what: str) -> None:
    """Announce that this rank's call ``what`` with ``args`` failed with ``exc``, then raise
    ``exc`` (or the job's fatal error while waiting). Returns when no announcement can be
    made (hvdcore not initialized, an unknown process set): the caller re-raises."""
    st = basics.current()
    if st is None:
        return
    try:
        sid = process_set_id(args.get("process_set", global_process_set), st.engine.sets,
                             what, st.rank)
        kind, names = plan(args, lambda counter, name: st.request_name(counter, sid, name))
    except Exception:  # noqa: BLE001 - nothing to announce under: the caller re-raises exc
        return
    herald = _herald(exc)
    try:
        requests.reject(st.engine, sid, kind, names, herald)
    except BaseException as got:
        if got is herald:
            raise exc from None
        raise


def announcing(plan: Plan, label: str | None = None) -> Callable[[_F], _F]:
    """Decorator for a public TensorFlow collective (parameters ``name`` and ``process_set``):
    an exception raised before the call reached the core is announced under ``plan`` (see
    :func:`announce`); ``label``: the kind :func:`build_name` names the op by in a TF1-style
    graph (default: the function's name). The success path costs two thread-local reads."""
    def wrap(fn: _F) -> _F:
        signature = inspect.signature(fn)
        op_kind = label or fn.__name__

        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            named, built = basics.thread_names.named, built_names.count
            try:
                return fn(*args, **kwargs)
            except Exception as exc:
                if basics.thread_names.named != named:  # the core had it: already announced
                    raise
                bound = signature.bind(*args, **kwargs)
                bound.apply_defaults()
                arguments = dict(bound.arguments)
                if arguments.get("name") is None and _in_session_graph():
                    arguments["name"] = (built_names.last if built_names.count != built
                                         else build_name(op_kind, None))
                announce(exc, plan, arguments, fn.__name__)
                raise
        return call  # type: ignore[return-value]
    return wrap
