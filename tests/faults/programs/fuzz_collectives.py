"""Hypothesis fuzzing of every public core collective, run on 2 ranks in lockstep.

Both ranks run the same hypothesis tests with ``derandomize=True`` (and no shrinking or
database), so they draw the same examples in the same order and their collectives stay
matched. Each example calls one collective with random dtypes (supported and not), shapes
(0-d, empty, ragged), non-contiguous / byte-swapped views, None and wrong types, random ops,
scale factors, roots and process sets (registered, unregistered, excluding this rank, not a
ProcessSet). Every call must either return exactly the result computed here with NumPy from
every rank's input (which is known on every rank: rank r's input is a function of the drawn
example and r), or raise an ``HvdcoreError`` with a message. The outcome kind is then
compared across the ranks that should agree, over a separate MPI communicator. Anything else
(another exception type, a wrong result, ranks disagreeing) is printed as a ``FUZZFAIL`` line;
a call running longer than ``--hang-s`` prints ``FUZZHANG`` and exits 3.

Output: ``FUZZ <target> examples=N ok=A errors=E failures=F worst_ms=W`` per target and
``FUZZTOTAL ...`` at the end. argv: ``--examples N`` per target.
"""

# Over 400 lines on purpose: one hypothesis test per public collective plus the NumPy reference
# each is checked against; both ranks must run this exact file in lockstep.

from __future__ import annotations

import argparse
import os
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

import numpy as np
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from mpi4py import MPI

import hvdcore as hvd
from hvdcore.engine.messages import ReduceOp

CHECK = MPI.COMM_WORLD.Dup()  # lockstep checks, independent of hvdcore's communicators
SUPPORTED = ("uint8", "int8", "int32", "int64", "float16", "float32", "float64", "bool")
UNSUPPORTED = ("int16", "uint16", "uint32", "uint64", "complex64", "complex128", "longdouble",
               "U3", "datetime64[s]", "object")
WRONG_TENSORS = (None, 3, 2.5, "tensor", [1.0, 2.0], {"a": 1}, b"bytes", (1, 2), object())


def _say(text: str) -> None:
    os.write(1, (text.replace("\n", " | ") + "\n").encode())


# -- strategies --------------------------------------------------------------------------------

@st.composite
def arrays(draw: Any, dtypes: tuple[str, ...] = SUPPORTED, min_dims: int = 0) -> np.ndarray:
    """A small array of a supported dtype, sometimes a non-contiguous or byte-swapped view."""
    dt = np.dtype(draw(st.sampled_from(dtypes)))
    shape = draw(hnp.array_shapes(min_dims=min_dims, max_dims=3, min_side=0, max_side=5))
    if dt.kind == "b":
        elems = st.booleans()
    elif dt.kind == "u":
        elems = st.integers(0, 4)
    elif dt.kind == "i":
        elems = st.integers(-4, 4)
    else:
        elems = st.floats(-4, 4, width=dt.itemsize * 8) | st.sampled_from([np.inf, -np.inf])
    base = draw(hnp.arrays(dt, shape, elements=elems))
    view = draw(st.sampled_from(["plain", "strided", "transposed", "reversed", "swapped"]))
    if view == "strided" and base.ndim:
        big = np.repeat(base, 2, axis=-1)
        return big[..., ::2]
    if view == "transposed" and base.ndim >= 2:
        return np.ascontiguousarray(base.T).T  # same values, Fortran order
    if view == "reversed" and base.ndim:
        return np.ascontiguousarray(base[::-1])[::-1]
    if view == "swapped" and dt.itemsize > 1 and dt.kind != "b":
        return base.astype(dt.newbyteorder(">"))
    return base


def bad_arrays() -> st.SearchStrategy:
    """Arrays of unsupported dtypes."""
    return st.sampled_from(UNSUPPORTED).map(
        lambda d: np.zeros(3, dtype=d) if d != "object" else np.array([1, None], dtype=object))


def tensors() -> st.SearchStrategy:
    """Mostly valid arrays; sometimes an unsupported dtype or not an array at all."""
    return st.one_of(arrays(), arrays(), arrays(), bad_arrays(), st.sampled_from(WRONG_TENSORS))


_VALID_OPS = [None, hvd.Average, hvd.Sum, hvd.Min, hvd.Max, hvd.Product, 0, 1]
# (Adasum is valid or not by dtype, set and world size: tests/programs/core_adasum.py)
OPS = st.sampled_from(_VALID_OPS * 3 + [7, -1, "sum", 2.5, 1.0, True])
FACTORS = st.sampled_from([1.0] * 8 + [0.5, 2.0, 0.25, 3, np.float32(0.5)] * 2
                          + ["x", None, float("nan"), True])
ROOTS = st.sampled_from([0, 1] * 4 + [np.int64(1), -1, 2, 5, None, "0", 1.0, True])
NAMES = st.sampled_from([None] * 6 + ["explicit"] * 2 + [7, b"bytes"])


class Sets:
    """The process sets examples pick from (registered once, the same on both ranks)."""

    def __init__(self) -> None:
        self.only0: Any = None
        self.only1: Any = None
        self.choices: list[tuple[str, Callable[[], Any]]] = [
            *[("global", lambda: hvd.global_process_set)] * 6,
            ("[0]", lambda: self.only0),
            ("[1]", lambda: self.only1),
            ("unregistered", lambda: hvd.ProcessSet([0, 1])),
            ("None", lambda: None),
            ("int", lambda: 0),
            ("list", lambda: [0, 1]),
        ]

    def register(self) -> None:
        """Register the subsets (collective: same order on both ranks)."""
        self.only0 = hvd.add_process_set([0])
        self.only1 = hvd.add_process_set([1])

    def strategy(self) -> st.SearchStrategy:
        return st.sampled_from(range(len(self.choices)))

    def get(self, i: int) -> tuple[str, Any, list[int] | None]:
        """(label, object, member ranks or None when the set is not usable)."""
        label, make = self.choices[i]
        ps = make()
        ranks = {"global": [0, 1], "[0]": [0], "[1]": [1]}.get(label)
        return label, ps, ranks


# -- reference computations --------------------------------------------------------------------

def per_rank(x: np.ndarray, r: int) -> np.ndarray:
    """Rank r's input derived from the drawn example (same shape, dtype and layout)."""
    if not isinstance(x, np.ndarray) or x.dtype.name not in SUPPORTED and \
            x.dtype.newbyteorder("=").name not in SUPPORTED:
        return x
    out = x.copy() if x.flags.c_contiguous else x.copy(order="K")
    if out.dtype.kind == "b":
        out ^= bool(r % 2)
    elif r:
        out += np.asarray(r).astype(out.dtype)
    if not x.flags.c_contiguous and x.ndim:  # keep the non-contiguous layout
        holder = np.repeat(out, 2, axis=-1)
        out = holder[..., ::2]
    return out


def _scale(dst: np.ndarray, src: np.ndarray, f: float) -> None:
    if f == 1.0:
        np.copyto(dst, src, casting="unsafe")
    else:
        np.multiply(src, f, out=dst, casting="unsafe")


def ref_reduce(xs: list[np.ndarray], op: ReduceOp, pre: float, post: float) -> np.ndarray:
    """Horovod semantics of allreduce over inputs ``xs`` (documented in hvdcore.executor)."""
    xs = [np.array(x, order="C").astype(x.dtype.newbyteorder("=")) for x in xs]
    dt = xs[0].dtype
    rd = np.dtype(np.float32) if dt == np.float16 else (
        np.dtype(np.uint8) if dt == np.bool_ else dt)
    if dt == np.bool_:
        pre = post = 1.0
        fn = np.maximum if op in (ReduceOp.SUM, ReduceOp.MAX) else np.minimum
    else:
        post = post / len(xs) if op == ReduceOp.AVERAGE else post
        fn = {ReduceOp.AVERAGE: np.add, ReduceOp.SUM: np.add, ReduceOp.MIN: np.minimum,
              ReduceOp.MAX: np.maximum, ReduceOp.PRODUCT: np.multiply}[op]
    parts = []
    for x in xs:
        buf = np.empty(x.shape, rd)
        _scale(buf, x.view(np.uint8) if dt == np.bool_ else x, pre)
        parts.append(buf)
    acc = parts[0]
    for p in parts[1:]:
        acc = fn(acc, p).astype(rd, copy=False)
    out = np.empty(xs[0].shape, dt)
    _scale(out.view(np.uint8) if dt == np.bool_ else out, acc, post)
    return out


def _strict_op(op: Any) -> None:
    """A successful call must have had a real op (a ReduceOp or a plain int), not 2.5."""
    if op is not None and (isinstance(op, bool) or not isinstance(op, (int, np.integer))):
        raise AssertionError(f"accepted op={op!r}")


def same(got: Any, want: np.ndarray) -> bool:
    """Exact equality of values, dtype (native order) and shape."""
    return (isinstance(got, np.ndarray) and got.shape == want.shape
            and got.dtype.newbyteorder("=") == want.dtype.newbyteorder("=")
            and np.array_equal(got, want, equal_nan=want.dtype.kind == "f"))


def describe(x: Any) -> str:
    """Short description of an argument for failure lines."""
    if isinstance(x, np.ndarray):
        return (f"ndarray(dtype={x.dtype.str}, shape={x.shape}, "
                f"contig={x.flags.c_contiguous}, data={x.ravel()[:6].tolist()})")
    if isinstance(x, list) and x and isinstance(x[0], np.ndarray):
        return "[" + ", ".join(describe(t) for t in x) + "]"
    return repr(x)[:80]


# -- the lockstep runner -----------------------------------------------------------------------

class Runner:
    """Runs one fuzz call per example, classifies it, compares outcomes across ranks."""

    def __init__(self, hang_s: float, verbose: bool = False) -> None:
        self.verbose = verbose
        self.rank = hvd.rank()
        self.stats: dict[str, list[float]] = {}
        self.failures = 0
        self.index = 0
        self.current: tuple[float, str] | None = None
        threading.Thread(target=self._watchdog, args=(hang_s,), daemon=True).start()

    def _watchdog(self, hang_s: float) -> None:
        while True:
            time.sleep(0.5)
            cur = self.current
            if cur is not None and time.monotonic() - cur[0] > hang_s:
                _say(f"FUZZHANG rank {self.rank}: no answer after {hang_s:.0f} s: {cur[1]}")
                os._exit(3)

    def check(self, target: str, call: Callable[[], Any], expect: Callable[[], Any] | None,
              desc: str, agree: list[int] | None) -> None:
        """Run ``call``; ``expect()`` gives the reference (None: any result accepted)."""
        self.index += 1
        desc = f"#{self.index} {target}({desc})"
        t0 = time.monotonic()
        self.current = (t0, desc)
        try:
            got = call()
        except hvd.HvdcoreError as exc:
            kind = f"error:{type(exc).__name__}"
            problem = None if str(exc).strip() else "HvdcoreError with an empty message"
            if self.verbose and self.rank == 0:
                _say(f"FUZZERR {desc[:200]} -> {type(exc).__name__}: {str(exc)[:200]}")
        except Exception as exc:  # noqa: BLE001 - anything else is what we are looking for
            kind = f"crash:{type(exc).__name__}"
            problem = ("not an HvdcoreError: " + "".join(
                traceback.format_exception_only(type(exc), exc)).strip()
                + " at " + traceback.extract_tb(exc.__traceback__)[-1].filename.split("/")[-1]
                + ":" + str(traceback.extract_tb(exc.__traceback__)[-1].lineno))
        else:
            kind = "ok"
            problem = None
            if expect is not None:
                try:
                    ok = expect()(got)
                except Exception as exc:  # noqa: BLE001
                    ok = False
                    problem = f"reference check failed: {type(exc).__name__}: {exc}"
                if not ok and problem is None:
                    problem = f"WRONG RESULT: got {describe(got)[:300]}"
        elapsed = time.monotonic() - t0
        self.current = None
        outcomes = CHECK.allgather((self.index, kind))
        if len({i for i, _ in outcomes}) != 1:
            problem = (problem or "") + f" ranks out of lockstep: {outcomes}"
        members = agree if agree is not None else list(range(CHECK.Get_size()))
        kinds = {outcomes[r][1] for r in members if r < len(outcomes)}
        if len(kinds) > 1:
            problem = (problem or "") + f" ranks {members} disagree: {outcomes}"
        self.stats.setdefault(target, []).append(elapsed)
        if problem:
            self.failures += 1
            self.stats.setdefault(target + "/fail", []).append(elapsed)
            _say(f"FUZZFAIL rank {self.rank} {desc}: {problem}")
        elif kind.startswith("error"):
            self.stats.setdefault(target + "/err", []).append(elapsed)

    def report(self, target: str) -> None:
        times = self.stats.get(target, [])
        if self.rank == 0:
            _say(f"FUZZ {target} examples={len(times)} "
                 f"ok={len(times) - len(self.stats.get(target + '/err', [])) - len(self.stats.get(target + '/fail', []))} "  # noqa: E501
                 f"errors={len(self.stats.get(target + '/err', []))} "
                 f"failures={len(self.stats.get(target + '/fail', []))} "
                 f"worst_ms={1000 * max(times, default=0):.1f}")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--examples", type=int, default=60)
    p.add_argument("--hang-s", type=float, default=30.0)
    p.add_argument("--verbose", action="store_true", help="print every error raised (rank 0)")
    a = p.parse_args()
    hvd.init()
    if hvd.size() != 2:
        raise SystemExit("run faults.programs.fuzz_collectives on exactly 2 ranks")
    rank = hvd.rank()
    _say(f"READY {rank} {os.getpid()}")
    sets = Sets()
    run = Runner(a.hang_s, a.verbose)
    cfg = settings(max_examples=a.examples, derandomize=True, database=None, deadline=None,
                   phases=[Phase.generate], suppress_health_check=list(HealthCheck),
                   print_blob=False)

    def ps_args(i: int) -> tuple[str, Any, list[int] | None, list[int] | None]:
        label, ps, ranks = sets.get(i)
        agree = ranks if ranks is not None else None
        return label, ps, ranks, agree

    # allreduce family ------------------------------------------------------------------------
    @cfg
    @given(x=tensors(), op=OPS, average=st.sampled_from([None] * 6 + [True, False]),
           pre=FACTORS, post=FACTORS, ps=sets.strategy(), name=NAMES,
           mode=st.sampled_from(["sync", "async", "grouped"]))
    def fuzz_allreduce(x: Any, op: Any, average: Any, pre: Any, post: Any, ps: int, name: Any,
                       mode: str) -> None:
        label, pset, ranks, agree = ps_args(ps)
        mine = per_rank(x, rank)
        kw = dict(average=average, name=name, op=op, prescale_factor=pre,
                  postscale_factor=post, process_set=pset)

        def call() -> Any:
            if mode == "sync":
                return hvd.allreduce(mine, **kw)
            if mode == "async":
                h = hvd.allreduce_async(mine, **kw)
                return hvd.synchronize(h)
            return hvd.grouped_allreduce([mine, mine], **kw)

        def expect() -> Callable[[Any], bool]:
            _strict_op(op)
            rop = ReduceOp(int(op if op is not None else (
                ReduceOp.AVERAGE if average in (None, True) else ReduceOp.SUM)))
            want = ref_reduce([per_rank(x, r) for r in ranks], rop, float(pre), float(post))
            if mode == "grouped":
                return lambda got: isinstance(got, list) and len(got) == 2 and all(
                    same(g, want) for g in got)
            return lambda got: same(got, want)

        run.check("allreduce", call, expect,
                  f"{describe(x)}, op={op!r}, average={average}, pre={pre!r}, post={post!r}, "
                  f"set={label}, name={name!r}, {mode}", agree)

    # allgather -------------------------------------------------------------------------------
    @cfg
    @given(x=tensors(), ps=sets.strategy(), name=NAMES, grouped=st.booleans())
    def fuzz_allgather(x: Any, ps: int, name: Any, grouped: bool) -> None:
        label, pset, ranks, agree = ps_args(ps)

        def part(r: int) -> Any:
            t = per_rank(x, r)
            return t[: max(t.shape[0] - r, 0)] if isinstance(t, np.ndarray) and t.ndim else t

        def call() -> Any:
            if grouped:
                return hvd.grouped_allgather([part(rank)], name=name, process_set=pset)
            return hvd.allgather(part(rank), name=name, process_set=pset)

        def expect() -> Callable[[Any], bool]:
            want = np.concatenate([np.atleast_1d(np.ascontiguousarray(part(r))) for r in ranks])
            want = want.astype(want.dtype.newbyteorder("="))
            if grouped:
                return lambda got: isinstance(got, list) and len(got) == 1 and same(got[0], want)
            return lambda got: same(got, want)

        run.check("allgather", call, expect,
                  f"{describe(x)}, set={label}, name={name!r}, grouped={grouped}", agree)

    # broadcast -------------------------------------------------------------------------------
    @cfg
    @given(x=tensors(), root=ROOTS, ps=sets.strategy(), name=NAMES)
    def fuzz_broadcast(x: Any, root: Any, ps: int, name: Any) -> None:
        label, pset, ranks, agree = ps_args(ps)

        def expect() -> Callable[[Any], bool]:
            want = np.array(per_rank(x, int(root)), order="C")
            want = want.astype(want.dtype.newbyteorder("="))
            return lambda got: same(got, want)

        run.check("broadcast", lambda: hvd.broadcast(per_rank(x, rank), root, name=name,
                                                     process_set=pset), expect,
                  f"{describe(x)}, root={root!r}, set={label}, name={name!r}", agree)

    # alltoall --------------------------------------------------------------------------------
    @cfg
    @given(x=tensors(), splits=st.one_of(
        st.none(), st.lists(st.integers(-1, 4), min_size=1, max_size=3),
        st.sampled_from(["ab", 3, [1.5, 0.5], np.array([1, 1])])), ps=sets.strategy(),
        name=NAMES)
    def fuzz_alltoall(x: Any, splits: Any, ps: int, name: Any) -> None:
        label, pset, ranks, agree = ps_args(ps)

        def expect() -> Callable[[Any], bool]:
            n = len(ranks)
            d0 = x.shape[0]
            sp = [d0 // n] * n if splits is None else [int(s) for s in np.asarray(splits)]
            me = ranks.index(rank)
            offs = np.cumsum([0, *sp])
            blocks = [np.ascontiguousarray(per_rank(x, r))[offs[me]:offs[me + 1]]
                      for r in ranks]
            want = np.concatenate(blocks)
            want = want.astype(want.dtype.newbyteorder("="))
            return lambda got: (isinstance(got, tuple) and len(got) == 2 and same(got[0], want)
                                and list(np.asarray(got[1])) == [sp[me]] * n)

        run.check("alltoall", lambda: hvd.alltoall(per_rank(x, rank), splits=splits, name=name,
                                                   process_set=pset), expect,
                  f"{describe(x)}, splits={splits!r}, set={label}, name={name!r}", agree)

    # reducescatter ---------------------------------------------------------------------------
    @cfg
    @given(x=tensors(), op=OPS, pre=FACTORS, post=FACTORS, ps=sets.strategy(), name=NAMES,
           grouped=st.booleans())
    def fuzz_reducescatter(x: Any, op: Any, pre: Any, post: Any, ps: int, name: Any,
                           grouped: bool) -> None:
        label, pset, ranks, agree = ps_args(ps)
        kw = dict(name=name, op=op, process_set=pset, prescale_factor=pre,
                  postscale_factor=post)

        def call() -> Any:
            if grouped:
                return hvd.grouped_reducescatter([per_rank(x, rank)], **kw)
            return hvd.reducescatter(per_rank(x, rank), **kw)

        def expect() -> Callable[[Any], bool]:
            _strict_op(op)
            rop = ReduceOp(int(op if op is not None else ReduceOp.AVERAGE))
            full = ref_reduce([per_rank(x, r) for r in ranks], rop, float(pre), float(post))
            n, me = len(ranks), ranks.index(rank)
            base, extra = divmod(full.shape[0], n)
            rows = [base + (i < extra) for i in range(n)]
            start = sum(rows[:me])
            want = full[start:start + rows[me]]
            if grouped:
                return lambda got: isinstance(got, list) and len(got) == 1 and same(got[0], want)
            return lambda got: same(got, want)

        run.check("reducescatter", call, expect,
                  f"{describe(x)}, op={op!r}, pre={pre!r}, post={post!r}, set={label}, "
                  f"name={name!r}, grouped={grouped}", agree)

    # barrier, objects ------------------------------------------------------------------------
    json_like = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5)
                             | st.floats(allow_nan=False),
                             lambda c: st.lists(c, max_size=3)
                             | st.dictionaries(st.text(max_size=3), c, max_size=3),
                             max_leaves=6)

    @cfg
    @given(obj=json_like, root=ROOTS, ps=sets.strategy(), name=NAMES,
           which=st.sampled_from(["barrier", "broadcast_object", "allgather_object"]))
    def fuzz_misc(obj: Any, root: Any, ps: int, name: Any, which: str) -> None:
        label, pset, ranks, agree = ps_args(ps)
        mine = [obj, rank]
        if which == "barrier":
            call: Callable[[], Any] = lambda: hvd.barrier(process_set=pset)  # noqa: E731
            expect = None
        elif which == "broadcast_object":
            def call() -> Any:
                return hvd.broadcast_object(mine, root_rank=root, name=name, process_set=pset)

            def expect() -> Callable[[Any], bool]:
                return lambda got: got == [obj, int(root)]
        else:
            def call() -> Any:
                return hvd.allgather_object(mine, name=name, process_set=pset)

            def expect() -> Callable[[Any], bool]:
                return lambda got: got == [[obj, r] for r in ranks]
        run.check(which, call, expect, f"obj={obj!r:.60}, root={root!r}, set={label}, "
                                       f"name={name!r}", agree)

    # process sets ----------------------------------------------------------------------------
    @cfg
    @given(ranks=st.one_of(st.lists(st.integers(-1, 3), max_size=3),
                           st.sampled_from([None, "01", 1, [0.5], [[0]], [True]])),
           wrap=st.booleans())
    def fuzz_process_sets(ranks: Any, wrap: bool) -> None:
        def call() -> Any:
            ps = hvd.ProcessSet(ranks) if wrap else ranks
            added = hvd.add_process_set(ps)
            try:
                total = hvd.allreduce(np.array([1.0]), op=hvd.Sum, process_set=added) \
                    if added.included() else None
            finally:
                removed = hvd.remove_process_set(added)
            return added, total, removed

        def expect() -> Callable[[Any], bool]:
            if not isinstance(ranks, (list, tuple)) or not all(
                    isinstance(r, (int, np.integer)) and not isinstance(r, bool) for r in ranks):
                raise AssertionError(f"accepted {ranks!r} as process set ranks")
            members = sorted({int(r) for r in ranks})
            return lambda got: (got[0].ranks == members and got[2] is True and
                                (got[1] is None if rank not in members
                                 else float(got[1][0]) == len(members)))

        run.check("process_set", call, expect, f"ranks={ranks!r}, wrap={wrap}", None)

    # misuse of handles -----------------------------------------------------------------------
    @cfg
    @given(h=st.sampled_from([None, 1, "handle", object(), np.ones(2)]),
           which=st.sampled_from(["poll", "synchronize"]))
    def fuzz_handles(h: Any, which: str) -> None:
        fn = hvd.poll if which == "poll" else hvd.synchronize
        run.check("handles", lambda: fn(h), lambda: (lambda got: False), f"{which}({h!r:.30})",
                  None)

    fuzz_process_sets()  # first: every other test uses the sets registered below
    run.report("process_set")
    sets.register()
    for target, fn in (("allreduce", fuzz_allreduce), ("allgather", fuzz_allgather),
                       ("broadcast", fuzz_broadcast), ("alltoall", fuzz_alltoall),
                       ("reducescatter", fuzz_reducescatter), ("misc", fuzz_misc),
                       ("handles", fuzz_handles)):
        fn()
        if target == "misc":
            for t in ("barrier", "broadcast_object", "allgather_object"):
                run.report(t)
        else:
            run.report(target)
    # still healthy after everything
    total = hvd.allreduce(np.array([1.0]), op=hvd.Sum, name="fuzz/final")
    ok = float(total[0]) == 2.0
    if rank == 0:
        _say(f"FUZZTOTAL examples={run.index} failures={run.failures} healthy={ok}")
    hvd.shutdown()


if __name__ == "__main__":
    main()
