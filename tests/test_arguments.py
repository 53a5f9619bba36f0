"""hvdcore.arguments: one exception type per mistake, the builtin type Horovod raises for it.

The checks are pure functions: no MPI, no init. The binding tests make the same mistake through
hvdcore.torch and hvdcore.tensorflow (the op check runs before anything needs ``init()``).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import numpy as np
import pytest

from hvdcore import arguments
from hvdcore.engine.messages import ReduceOp
from hvdcore.errors import (
    ArgumentError,
    HvdcoreError,
    NotInitializedError,
    UnimplementedError,
    UnsupportedError,
)
from hvdcore.process_sets import ProcessSet

VALUE_MISTAKES = [
    ("op and average", lambda: arguments.resolve_op(True, ReduceOp.SUM)),
    ("unknown op", lambda: arguments.resolve_op(None, 42)),
    ("bool Average", lambda: arguments.as_array(np.ones(2, bool), "allreduce", 0,
                                                ReduceOp.AVERAGE)),
    ("dtype", lambda: arguments.as_array(np.ones(2, np.complex64), "allreduce", 0)),
    ("splits sum", lambda: arguments.alltoall_splits([1, 1], 3, 2)),
    ("splits length", lambda: arguments.alltoall_splits([3], 3, 2)),
    ("splits negative", lambda: arguments.alltoall_splits([-1, 4], 3, 2)),
    ("splits not integers", lambda: arguments.alltoall_splits(["a", "b"], 3, 2)),
    ("even split impossible", lambda: arguments.alltoall_splits(None, 3, 2)),
    ("splits form", lambda: arguments.splits_vector([[1, 2]])),
    ("splits float", lambda: arguments.splits_vector([1.0, 2.0])),
    ("root not in set", lambda: arguments.broadcast_root(5, [0, 1], 0)),
    ("root a bool", lambda: arguments.broadcast_root(True, [0, 1], 0)),
    ("out shape", lambda: arguments.output_for(np.ones(3), np.ones(2), np.ones(2), "x")),
    ("set not registered", lambda: arguments.process_set_id(ProcessSet([0]), {0: None},
                                                            "allreduce", 0)),
    ("not a member", lambda: _member_check()),
    ("set duplicates", lambda: ProcessSet([0, 0])),
    ("set ranks not integers", lambda: ProcessSet([0.5])),
]

TYPE_MISTAKES = [
    ("op a string", lambda: arguments.resolve_op(None, "sum")),
    ("op a float", lambda: arguments.resolve_op(None, 1.5)),
    ("op a bool", lambda: arguments.resolve_op(None, True)),
    ("tensor a list", lambda: arguments.as_array([1, 2], "allreduce", 0)),
    ("factor a string", lambda: arguments.scale_factor("x", "prescale_factor", "allreduce")),
    ("out a list", lambda: arguments.output_for([1.0], np.ones(1), np.ones(1), "x")),
    ("process_set a str", lambda: arguments.process_set_id("global", {}, "allreduce", 0)),
]


def _member_check() -> int:
    ps = ProcessSet([1])
    ps.bind(1, 0)
    return arguments.process_set_id(ps, {0: None, 1: None}, "allreduce", 0)


@pytest.mark.parametrize("label,call", VALUE_MISTAKES, ids=[m[0] for m in VALUE_MISTAKES])
def test_a_wrong_value_is_a_value_error(label: str, call) -> None:
    with pytest.raises(ArgumentError) as info:
        call()
    # Horovod users catch ValueError; hvdcore's earlier callers caught UnsupportedError/TypeError
    err = info.value
    assert isinstance(err, ValueError) and isinstance(err, UnsupportedError)
    assert isinstance(err, TypeError) and isinstance(err, HvdcoreError)
    assert str(err)


@pytest.mark.parametrize("label,call", TYPE_MISTAKES, ids=[m[0] for m in TYPE_MISTAKES])
def test_a_wrong_type_is_a_type_error(label: str, call) -> None:
    with pytest.raises(UnsupportedError) as info:
        call()
    assert isinstance(info.value, TypeError) and not isinstance(info.value, ValueError)


def test_adasum_is_not_implemented_in_the_core_only() -> None:
    with pytest.raises(UnimplementedError) as info:
        arguments.resolve_op(None, ReduceOp.ADASUM, allow_adasum=False)
    assert isinstance(info.value, NotImplementedError) and isinstance(info.value, UnsupportedError)
    # allreduce takes it (the core checks its limits when the tensor is known)
    assert arguments.resolve_op(None, ReduceOp.ADASUM) is ReduceOp.ADASUM


@pytest.mark.parametrize("average,op,want", [
    (None, None, ReduceOp.AVERAGE), (True, None, ReduceOp.AVERAGE), (False, None, ReduceOp.SUM),
    (None, 1, ReduceOp.SUM), (None, np.int64(4), ReduceOp.MAX), (None, ReduceOp.MIN, ReduceOp.MIN),
])
def test_resolve_op_follows_horovod(average: bool | None, op, want: ReduceOp) -> None:
    assert arguments.resolve_op(average, op) is want


def test_valid_arguments_pass_through() -> None:
    a = np.arange(6.0).reshape(2, 3)
    assert arguments.as_array(a, "allreduce", 0) is a
    swapped = a.astype(a.dtype.newbyteorder(">"))
    assert arguments.as_array(swapped, "allreduce", 0).dtype == np.float64
    assert arguments.as_array(a[:, ::2], "allreduce", 0).flags.c_contiguous
    assert arguments.alltoall_splits(None, 4, 2) == [2, 2]
    assert arguments.alltoall_splits(np.array([1, 3]), 4, 2) == [1, 3]
    assert arguments.broadcast_root(np.int64(1), [0, 1], 0) == 1
    assert arguments.scale_factor(np.float32(0.5), "prescale_factor", "allreduce") == 0.5
    assert arguments.splits_vector([1, 2]).dtype == np.int32


def test_out_in_place_and_overlap() -> None:
    x = np.ones(4)
    assert arguments.output_for(x, x, x, "allreduce") is x  # the same array: in place
    view = x.view()
    assert arguments.output_for(view, x, x, "allreduce") is view  # same memory: in place
    big = np.ones(8)
    got = arguments.output_for(big[2:6], big[:4], big[:4], "allreduce")
    assert got is not big[:4] and not np.may_share_memory(got, big)  # overlap: private copy
    other = np.empty(4)
    assert arguments.output_for(other, x, x, "allreduce") is x


def test_not_initialized_is_also_a_value_error() -> None:
    assert issubclass(NotInitializedError, ValueError)
    assert issubclass(NotInitializedError, HvdcoreError)


_BINDING = """
import sys
import {module} as hvd
from hvdcore.errors import ArgumentError
try:
    hvd.allreduce({tensor}, average=True, op=hvd.Sum)
except ArgumentError as exc:
    assert isinstance(exc, ValueError), type(exc)
    print("OK", type(exc).__name__)
"""


@pytest.mark.torch
@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
def test_torch_binding_raises_the_same_type() -> None:
    code = _BINDING.format(module="hvdcore.torch", tensor="__import__('torch').ones(2)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0 and "OK ArgumentError" in proc.stdout, proc.stderr[-3000:]


@pytest.mark.tensorflow
@pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None,
                    reason="TensorFlow is not installed")
def test_tensorflow_binding_raises_the_same_type() -> None:
    code = _BINDING.format(module="hvdcore.tensorflow",
                           tensor="__import__('tensorflow').ones([2])")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0 and "OK ArgumentError" in proc.stdout, proc.stderr[-3000:]


_PROCESS_SETS = """
import numpy as np
import hvdcore as hvd
try:
    hvd.init(process_sets="every")
    raise SystemExit("a string other than 'dynamic' was accepted")
except ValueError as exc:
    assert "'dynamic'" in str(exc), exc
hvd.init(process_sets="dynamic")  # Horovod's spelling (basics.py init)
try:
    hvd.add_process_set([0])  # the ranks of the global set
    raise SystemExit("a duplicate process set was accepted")
except ValueError as exc:  # Horovod: ValueError("Attempted to add a duplicate process set")
    assert "duplicate" in str(exc), exc
assert hvd.allreduce(np.ones(2), op=hvd.Sum).tolist() == [1.0, 1.0]
print("OK")
"""


def test_process_sets_dynamic_and_duplicates_as_horovod() -> None:
    """``init(process_sets="dynamic")`` is accepted, another string is a ValueError before
    anything starts; a duplicate ``add_process_set`` is a ValueError and the runtime goes on."""
    proc = subprocess.run([sys.executable, "-c", _PROCESS_SETS], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stderr[-3000:]
