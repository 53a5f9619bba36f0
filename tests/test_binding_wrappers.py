"""The binding layer's per-call helpers, in one process (no MPI): the ``rejecting`` decorator's
generated wrapper and the torch binding's host views (which tensors the host MPI plane reduces
as they are). Their multi-rank behaviour is tested through the bindings
(``test_torch_error_sequence.py``, ``programs/torch_collectives.py``)."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
import torch

import hvdcore.torch as hvd
from hvdcore.collectives import rejecting
from hvdcore.engine.messages import ALLREDUCE
from hvdcore.torch import collectives as C

pytestmark = pytest.mark.torch


@rejecting(ALLREDUCE)
def _sample(tensor, scale=2, name=None, *, tag="t"):  # noqa: ANN001, ANN202
    """Sample docstring."""
    if scale is None:
        raise ValueError("scale is None")
    return tensor, scale, name, tag


def test_wrapper_passes_arguments_as_the_function_takes_them() -> None:
    assert _sample(1) == (1, 2, None, "t")
    assert _sample(1, 3, "n", tag="u") == (1, 3, "n", "u")
    assert _sample(tensor=4, name="m") == (4, 2, "m", "t")
    with pytest.raises(TypeError):
        _sample(1, 2, "n", "positional tag")  # keyword-only stays keyword-only
    with pytest.raises(TypeError):
        _sample()  # a required argument stays required
    with pytest.raises(TypeError):
        _sample(1, bogus=1)


def test_wrapper_keeps_name_doc_and_signature() -> None:
    assert _sample.__name__ == "_sample" and _sample.__doc__ == "Sample docstring."
    assert inspect.signature(_sample) == inspect.signature(_sample.__wrapped__)
    for fn in (hvd.allreduce, hvd.allreduce_, hvd.allreduce_async, hvd.grouped_allreduce,
               hvd.alltoall, hvd.reducescatter):
        assert inspect.signature(fn) == inspect.signature(fn.__wrapped__), fn.__name__
        # (signature() follows __wrapped__: the generated function's own defaults, which
        # callers get, are checked here)
        assert fn.__defaults__ == fn.__wrapped__.__defaults__, fn.__name__
        assert fn.__kwdefaults__ == fn.__wrapped__.__kwdefaults__, fn.__name__


def test_wrapper_reraises_as_is_before_init() -> None:
    with pytest.raises(ValueError, match="scale is None"):
        _sample(1, None)


@pytest.mark.parametrize("bad", ["varargs", "varkw", "named exc", "private"])
def test_wrapper_refuses_signatures_it_cannot_copy(bad: str) -> None:
    sources = {
        "varargs": "def f(tensor, *rest): pass",
        "varkw": "def f(tensor, **kw): pass",
        "named exc": "def f(tensor, exc=None): pass",
        "private": "def f(tensor, _x=None): pass",
    }
    env: dict = {}
    exec(sources[bad], env)
    with pytest.raises(TypeError, match="rejecting"):
        rejecting(ALLREDUCE)(env["f"])


def _shares(view: np.ndarray | None, t: torch.Tensor) -> bool:
    return view is not None and np.shares_memory(view, t.detach().numpy())


def test_host_views_of_tensors_the_plane_reduces_as_they_are() -> None:
    for dtype in (torch.float32, torch.float64, torch.float16, torch.int32, torch.int64,
                  torch.int8, torch.uint8, torch.bool):
        t = torch.ones(6, dtype=dtype)
        assert _shares(C.plain_view(t), t) and _shares(C.host_view(t), t), dtype
    strided = torch.arange(12.0).reshape(3, 4)[:, ::2]
    view = C.plain_view(strided)
    assert _shares(view, strided) and view.shape == (3, 2)
    assert C.inplace_host_array(strided) is None  # in place needs C order


def test_host_views_refuse_what_needs_staging_or_autograd() -> None:
    grad = torch.ones(4, requires_grad=True)
    assert C.plain_view(grad) is None  # the blocking fast path must leave it to autograd
    assert _shares(C.host_view(grad), grad)  # detached, for calls that need no autograd
    for t in (torch.ones(4, dtype=torch.bfloat16), torch.ones(4, dtype=torch.int16),
              torch.ones(4, dtype=torch.complex64), torch.ones(4, dtype=torch.complex64).conj(),
              torch.ones(4, dtype=torch.complex64).conj().imag,  # a negative-bit view
              torch.ones(4).to_sparse()):
        assert C.plain_view(t) is None and C.host_view(t) is None, (t.dtype, t.layout)
