"""Every recoverable error case, one after another in one long-running process.

After each case every rank must raise the expected exception type (the same type on every
rank, naming the rank at fault), the next collective must give the right answer, and at the
end shutdown() must return at once. Run at 1, 2 and 3 ranks; ``ROUNDS`` repeats the whole
sequence (Horovod's own test programs run dozens of error cases in one process).

Prints ``CASE <name> OK`` per case and ``SEQUENCE OK <cases>`` at the end.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

import hvdcore as hvd

hvd.init()
rank, size = hvd.rank(), hvd.size()
ROUNDS = int(os.environ.get("ROUNDS", "2"))
done = 0


def healthy(tag: str) -> None:
    """A collective right after an error works and is right (fresh and cached names)."""
    got = hvd.allreduce(np.full(3, rank + 1.0), op=hvd.Sum, name=f"healthy.{tag}")
    assert got.tolist() == [size * (size + 1) / 2] * 3, (tag, got)
    got = hvd.allreduce(np.full(2, float(rank)), op=hvd.Sum, name="healthy.cached")
    assert got.tolist() == [size * (size - 1) / 2] * 2, (tag, got)
    got = hvd.allgather(np.array([rank]))
    assert got.tolist() == list(range(size)), (tag, got)


def case(name: str, exc: type[BaseException], fn, needle: str = "", only_multi: bool = False,
         ) -> None:
    """Run ``fn`` on every rank and require ``exc`` (whose text names ``needle``)."""
    global done
    if only_multi and size == 1:
        return
    try:
        fn()
    except exc as err:
        text = str(err)
        assert needle in text, f"case {name}: {needle!r} not in {text!r}"
    except BaseException as err:  # noqa: BLE001 - report the wrong type clearly
        raise AssertionError(f"case {name}: rank {rank} raised {type(err).__name__}: {err} "
                             f"(expected {exc.__name__})") from err
    else:
        raise AssertionError(f"case {name}: rank {rank} did not raise {exc.__name__}")
    healthy(name)
    done += 1
    print(f"CASE {name} OK", flush=True)


def other_rank_bad(good, bad):
    """Rank 0 passes the bad argument, the others the good one (a one-rank local error)."""
    return bad if rank == 0 else good


t_start = time.monotonic()
for rnd in range(ROUNDS):
    x = np.ones(4, np.float32)
    # -- mismatches found by negotiation ----------------------------------------------------
    case("shape", hvd.MismatchError,
         lambda: hvd.allreduce(np.ones(4 + (rank % 2), np.float32), name=f"shape{rnd}"),
         "mismatched shape", only_multi=True)
    case("dtype", hvd.MismatchError,
         lambda: hvd.allreduce(x.astype(np.float64 if rank % 2 else np.float32),
                               name=f"dtype{rnd}"), "mismatched dtype", only_multi=True)
    case("op", hvd.MismatchError,
         lambda: hvd.allreduce(x, op=hvd.Sum if rank % 2 else hvd.Max, name=f"op{rnd}"),
         "mismatched op", only_multi=True)
    case("prescale", hvd.MismatchError,
         lambda: hvd.allreduce(x, prescale_factor=1.0 + rank % 2, name=f"pre{rnd}"),
         "mismatched prescale", only_multi=True)
    case("root", hvd.MismatchError,
         lambda: hvd.broadcast(x, root_rank=rank % 2, name=f"root{rnd}"),
         "mismatched root", only_multi=True)
    case("kind", hvd.MismatchError,
         lambda: (hvd.allreduce(x, name=f"kind{rnd}") if rank % 2
                  else hvd.allgather(x, name=f"kind{rnd}")), "mismatched kind", only_multi=True)
    case("allgather-trailing", hvd.MismatchError,
         lambda: hvd.allgather(np.ones((2, 2 + rank % 2)), name=f"ag{rnd}"),
         "mismatched trailing shape", only_multi=True)
    case("alltoall-dtype", hvd.MismatchError,
         lambda: hvd.alltoall(np.ones(size, np.int32 if rank % 2 else np.int64),
                              name=f"a2a{rnd}"), "mismatched dtype", only_multi=True)
    case("reducescatter-shape", hvd.MismatchError,
         lambda: hvd.reducescatter(np.ones((size + rank % 2, 2)), name=f"rs{rnd}"),
         "mismatched shape", only_multi=True)
    # a cached tensor (its name ran before) whose shape changes on one rank
    hvd.allreduce(np.ones(3), name="cached.grad")
    hvd.allreduce(np.ones(3), name="cached.grad")
    case("cached-shape", hvd.MismatchError,
         lambda: hvd.allreduce(np.ones(3 + (rank == 0)), name="cached.grad"),
         "mismatched shape", only_multi=True)
    assert hvd.allreduce(np.ones(3), name="cached.grad").tolist() == [1.0] * 3
    # a cached tensor whose call is rejected on one rank (the peers' cache hits must fail)
    case("cached-rejected-one-rank", ValueError,
         lambda: hvd.allreduce(other_rank_bad(np.ones(3), np.ones(3, np.complex64)),
                               name="cached.grad"), "rank 0")
    assert hvd.allreduce(np.ones(3), name="cached.grad").tolist() == [1.0] * 3

    # -- errors found on one rank only: every rank must fail, with that rank named ---------
    case("splits-one-rank", ValueError,
         lambda: hvd.alltoall(np.arange(2.0 * size),
                              splits=other_rank_bad([2] * size, [2] * (size - 1) + [1])),
         "rank 0")
    case("splits-all-ranks", ValueError,
         lambda: hvd.alltoall(np.arange(2.0 * size), splits=[3] * size), "splits")
    case("alltoall-indivisible", ValueError,
         lambda: hvd.alltoall(np.arange(2 * size + 1.0)), "divisible", only_multi=True)
    case("alltoall-indivisible-one-rank", ValueError,
         lambda: hvd.alltoall(np.arange(2.0 * size + (rank == 0))), "rank 0", only_multi=True)
    case("root-one-rank", ValueError,
         lambda: hvd.broadcast(x, root_rank=other_rank_bad(0, size + 3)), "root_rank")
    case("dtype-one-rank", ValueError,
         lambda: hvd.allreduce(other_rank_bad(x, x.astype(np.complex64))), "rank 0")
    case("bool-average-one-rank", ValueError,
         lambda: hvd.allreduce(other_rank_bad(x > 0, x > 0),
                               op=other_rank_bad(hvd.Sum, hvd.Average)), "rank 0")
    case("adasum-one-rank", hvd.UnsupportedError,
         lambda: hvd.allreduce(other_rank_bad(x, x.astype(np.int32)), op=hvd.Adasum),
         "Adasum")
    if size & (size - 1):  # Horovod's limit: a power-of-two number of ranks
        case("adasum-ranks", NotImplementedError, lambda: hvd.allreduce(x, op=hvd.Adasum),
             "power-of-two")
    case("not-an-array-one-rank", TypeError,
         lambda: hvd.allgather(other_rank_bad(x, [1, 2, 3])), "rank 0")
    case("out-one-rank", ValueError,
         lambda: hvd.allreduce(x, out=other_rank_bad(np.empty(4, np.float32),
                                                     np.empty(5, np.float32))), "out=")
    case("grouped-one-rank", ValueError,
         lambda: hvd.grouped_allreduce([x, other_rank_bad(x, x.astype(np.complex64))]),
         "rank 0")
    case("reducescatter-scalar-one-rank", ValueError,
         lambda: hvd.reducescatter(other_rank_bad(np.ones(size), np.float64(1.0))), "rank 0")
    case("async-one-rank", ValueError,
         lambda: hvd.synchronize(hvd.alltoall_async(
             np.arange(2.0 * size), splits=other_rank_bad([2] * size, [-1] * size))), "rank 0")

    case("add-process-set-one-rank", ValueError,
         lambda: hvd.add_process_set(other_rank_bad([0], [size + 5])), "rank 0")
    if size > 1:  # (at np 1 the only possible set is the global one)
        ps = hvd.add_process_set([size - 1])
        if rank == size - 1:
            assert hvd.allreduce(np.ones(1), op=hvd.Sum, process_set=ps).tolist() == [1.0]
        assert hvd.remove_process_set(ps)

    # -- a name still in use raises at submission, on the rank that reuses it --------------
    # (Horovod's test_horovod_*_duplicate_name_error; deterministic: the peers submit their
    # counterpart only after rank 0's second call returned)
    dup_calls = {
        "allreduce": lambda nm: hvd.allreduce_async(x, name=nm),
        "allgather": lambda nm: hvd.allgather_async(x, name=nm),
        "broadcast": lambda nm: hvd.broadcast_async(x, 0, name=nm),
        "reducescatter": lambda nm: hvd.reducescatter_async(np.ones(2 * size), name=nm),
    }
    for kind, submit in dup_calls.items():
        nm = f"dup.{kind}{rnd}"
        if rank == 0:
            first = submit(nm)
            try:
                submit(nm)
            except ValueError as err:
                assert "same name" in str(err), err
            else:
                raise AssertionError(f"a duplicate {kind} name was accepted")
            hvd.allreduce(x, name=f"sync.{nm}")
            hvd.synchronize(first)
        else:
            hvd.allreduce(x, name=f"sync.{nm}")
            hvd.synchronize(submit(nm))
        healthy(f"duplicate-{kind}")
        done += 1
        print(f"CASE duplicate-{kind} OK", flush=True)

elapsed = time.monotonic() - t_start
t0 = time.monotonic()
hvd.shutdown()
took = time.monotonic() - t0
print(f"SEQUENCE OK {done} cases in {elapsed:.1f} s; shutdown {took:.2f} s", flush=True)
sys.exit(0)
