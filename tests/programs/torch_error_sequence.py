"""Horovod's error cases through ``hvdcore.torch``, one after another in one process.

Like ``core_error_sequence.py`` but through the torch binding, whose own checks (tensor type,
splits form, dtype/layout a reduction cannot take) run before the core's: an error found on
one rank only must still fail the matching call on every rank, and after each case the next
collective must work. Prints ``SEQUENCE OK <cases>`` per rank; ``ROUNDS`` repeats the cases.
"""

from __future__ import annotations

import os
import sys

import torch

import hvdcore.torch as hvd

hvd.init()
rank, size = hvd.rank(), hvd.size()
ROUNDS = int(os.environ.get("ROUNDS", "2"))
done = 0


def healthy(tag: str) -> None:
    got = hvd.allreduce(torch.full((3,), rank + 1.0), op=hvd.Sum, name=f"healthy.{tag}")
    assert got.tolist() == [size * (size + 1) / 2] * 3, (tag, got)
    got = hvd.allreduce(torch.full((2,), float(rank)), op=hvd.Sum, name="healthy.cached")
    assert got.tolist() == [size * (size - 1) / 2] * 2, (tag, got)
    got = hvd.allgather(torch.tensor([rank]))
    assert got.tolist() == list(range(size)), (tag, got)


def case(name: str, exc: type[BaseException] | tuple, fn, needle: str = "",
         only_multi: bool = False) -> None:
    global done
    if only_multi and size == 1:
        return
    try:
        fn()
    except exc as err:
        assert needle in str(err), f"case {name}: {needle!r} not in {str(err)!r}"
    except BaseException as err:  # noqa: BLE001 - report the wrong type clearly
        raise AssertionError(f"case {name}: rank {rank} raised {type(err).__name__}: {err}"
                             ) from err
    else:
        raise AssertionError(f"case {name}: rank {rank} did not raise")
    healthy(name)
    done += 1
    print(f"CASE {name} OK", flush=True)


def bad_on_0(good, bad):
    return bad if rank == 0 else good


for rnd in range(ROUNDS):
    x = torch.ones(4)
    case("shape", RuntimeError, lambda: hvd.allreduce(torch.ones(4 + rank % 2)),
         "mismatched shape", only_multi=True)
    case("dtype", RuntimeError,
         lambda: hvd.allreduce(x.double() if rank % 2 else x), "mismatched dtype",
         only_multi=True)
    case("root", RuntimeError, lambda: hvd.broadcast(x, root_rank=rank % 2),
         "mismatched root", only_multi=True)
    case("allgather-trailing", RuntimeError,
         lambda: hvd.allgather(torch.ones(2, 2 + rank % 2)), "mismatched", only_multi=True)
    case("not-a-tensor-one-rank", (TypeError, ValueError),
         lambda: hvd.allreduce(bad_on_0(x, [1.0, 2.0])), "")
    case("splits-form-one-rank", ValueError,
         lambda: hvd.alltoall(torch.arange(2.0 * size),
                              splits=bad_on_0(torch.tensor([2] * size),
                                              torch.tensor([[2] * size]))), "splits")
    case("splits-sum-one-rank", ValueError,
         lambda: hvd.alltoall(torch.arange(2.0 * size),
                              splits=bad_on_0([2] * size, [3] * size)), "splits")
    case("complex-max-one-rank", ValueError,
         lambda: hvd.allreduce(bad_on_0(x, x.to(torch.complex64)),
                               op=hvd.Max), "complex")
    case("sparse-layout-one-rank", ValueError,
         lambda: hvd.allgather(bad_on_0(torch.ones(2, 2), torch.ones(2, 2).to_sparse())),
         "layout")
    case("root-one-rank", ValueError,
         lambda: hvd.broadcast(x, root_rank=bad_on_0(0, size + 2)), "root_rank")
    case("grouped-one-rank", (TypeError, ValueError),
         lambda: hvd.grouped_allreduce([x, bad_on_0(x, "not a tensor")]), "")

    # a name still in use raises ValueError at submission on the rank that reuses it
    if rank == 0:
        first = hvd.allreduce_async(x, name=f"dup{rnd}")
        try:
            hvd.allreduce_async(x, name=f"dup{rnd}")
        except ValueError as err:
            assert "same name" in str(err), err
        else:
            raise AssertionError("a duplicate name was accepted")
        hvd.allreduce(x, name=f"dup.sync{rnd}")
        assert hvd.synchronize(first).tolist() == [1.0] * 4
    else:
        hvd.allreduce(x, name=f"dup.sync{rnd}")
        assert hvd.allreduce(x, name=f"dup{rnd}").tolist() == [1.0] * 4
    healthy("duplicate-name")
    done += 1

hvd.shutdown()
print(f"SEQUENCE OK {done}", flush=True)
sys.exit(0)
