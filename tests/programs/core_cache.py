"""The response cache with real ranks: repeated tensors take the cached path (argv[1:]: cases).

Cases: repeat (results vs a NumPy reference over many steps, submission order varying by rank),
mismatch (a cached name submitted with another shape on one rank), reshape (every rank changes
the shape), join (a rank joins while the others repeat cached allreduces), capacity (more names
than the cache holds), async, release, batch (hvdcore.ops.allreduce_batch_async and repeated in-place calls),
queued (several cached requests synchronized together), checked (one name, changing
arguments). Stalls of cached tensors: tests/programs/core_stall.py ... cached.
"""

import os
import sys

import numpy as np

import hvdcore as hvd
from hvdcore import basics

hvd.init()
R, N = hvd.rank(), hvd.size()
engine = basics.state().engine


def say(text: str) -> None:
    """One write per line, so lines of different ranks never interleave in mpirun's output."""
    os.write(1, (text + "\n").encode())


def value(step: int, rank: int, shape: tuple[int, ...], salt: int) -> np.ndarray:
    rng = np.random.default_rng(1000 * step + 10 * rank + salt)
    return rng.standard_normal(shape).astype(np.float32)


def check(got: np.ndarray, want: np.ndarray, what: str) -> None:
    # float64 against a float64 reference: exact enough to catch a reduction done in float32
    tol = 1e-12 if got.dtype == want.dtype == np.float64 else 1e-5
    if not np.allclose(got, want, rtol=tol, atol=tol / 10):
        raise AssertionError(f"rank {R}: {what}: got {got.ravel()[:4]}, want {want.ravel()[:4]}")


def refuses_bad_arguments(call) -> None:
    """``call(**bad)`` raises UnsupportedError for a bool scale factor and for a str op."""
    for bad in (dict(prescale_factor=True), dict(op="sum")):
        try:
            call(**bad)
            raise AssertionError(f"{bad} must be refused")
        except hvd.UnsupportedError as exc:
            say(f"rank {R} refused {list(bad)[0]}: {exc}")


# several cases may run in one launch, in the order given (the tests share launches)
for case in sys.argv[1:]:
    shapes = {"a": (7,), "b": (3, 5), "c": (1000,)}
    if case == "repeat":
        for step in range(60):
            names = list(shapes)
            if (step + R) % 2:  # ranks submit in different orders: the rounds must still agree
                names.reverse()
            salt = {nm: i for i, nm in enumerate(shapes)}
            handles = {nm: hvd.allreduce_async(value(step, R, shapes[nm], salt[nm]), name=nm,
                                               op=hvd.Sum if nm == "b" else hvd.Average)
                       for nm in names}
            for nm in names:
                want = sum(value(step, r, shapes[nm], salt[nm]) for r in range(N))
                if nm != "b":
                    want = want / N
                check(hvd.synchronize(handles[nm]), want, f"step {step} tensor {nm}")
            got = hvd.allreduce(np.full(4, float(R + step)), op=hvd.Max, name="max",
                                prescale_factor=2.0)
            check(got, np.full(4, 2.0 * (N - 1 + step)), f"step {step} max")
            # blocking calls of every kind of tensor: the fast path and its general fallback
            for dt in (np.float16, np.int32, np.bool_, np.float64):
                x = ((np.arange(5) + R + step) % 3).astype(dt)
                op = hvd.Max if dt == np.bool_ else hvd.Sum
                want = sum(((np.arange(5) + r + step) % 3).astype(np.float64) for r in range(N))
                if dt == np.bool_:
                    want = np.max([((np.arange(5) + r + step) % 3).astype(dt) for r in range(N)], 0)
                got = hvd.allreduce(x, op=op, name=f"dt.{np.dtype(dt).name}")
                assert got.dtype == dt, got.dtype
                check(got.astype(np.float64), np.asarray(want, np.float64), f"step {step} {dt}")
            buf = np.full(6, float(R + step))
            hvd.allreduce(buf, op=hvd.Sum, name="inplace", out=buf)
            check(buf, np.full(6, float(sum(range(N)) + N * step)), f"step {step} in place")
            avg = hvd.allreduce(np.full(3, float(R)), name="avg")
            check(avg, np.full(3, (N - 1) / 2), f"step {step} average")
        # the fast-path count is for information only (it depends on scheduling)
        say(f"rank {R} repeat ok: {len(engine.cache)} cached, {engine.rounds_posted} rounds, "
            f"{engine.fast_count} fast")
    elif case in ("mismatch", "reshape"):
        for _ in range(3):
            hvd.allreduce(np.ones(4, np.float32), name="w")
        grow = (R == 1) if case == "mismatch" else True
        try:
            out = hvd.allreduce(np.ones(4 + grow, np.float32), op=hvd.Sum, name="w")
        except hvd.MismatchError as exc:
            say(f"rank {R} caught MismatchError: {exc}")
        else:
            check(out, np.full(4 + grow, float(N)), "reshaped")
            say(f"rank {R} reshaped ok")
        for _ in range(3):  # the name is cached again with whatever shape comes next
            out = hvd.allreduce(np.ones(4, np.float32), op=hvd.Sum, name="w")
            check(out, np.full(4, float(N)), "after")
        say(f"rank {R} healthy after: {len(engine.cache)} cached")
    elif case == "join":
        steps = 3 if R == 1 else 20
        for step in range(steps):
            out = hvd.allreduce(np.full(3, 1.0), op=hvd.Sum, name="j")
            expect = N if step < 3 else N - 1  # the joined rank adds nothing
            check(out, np.full(3, float(expect)), f"join step {step}")
        last = hvd.join()
        say(f"rank {R} join returned {last}")
        out = hvd.allreduce(np.full(3, 1.0), op=hvd.Sum, name="j")
        check(out, np.full(3, float(N)), "after join")
        say(f"rank {R} healthy after join")
    elif case == "capacity":
        for _ in range(4):
            for k in range(6):
                out = hvd.allreduce(np.full(2, float(R + k)), op=hvd.Sum, name=f"t{k}")
                check(out, np.full(2, float(sum(range(N)) + N * k)), f"t{k}")
        say(f"rank {R} capacity ok: {len(engine.cache)} cached")
    elif case == "async":
        # allreduce_async + synchronize with nothing in between (the lone queued request takes
        # the blocking fast path once cached), mixed with two requests in flight at once and
        # with one synchronized out of submission order: every result against NumPy.
        for step in range(40):
            xs = {nm: value(step, R, (33,), salt) for salt, nm in enumerate(("p", "q", "r"))}
            want = {nm: sum(value(step, r, (33,), salt) for r in range(N))
                    for salt, nm in enumerate(("p", "q", "r"))}
            check(hvd.synchronize(hvd.allreduce_async(xs["p"], op=hvd.Sum, name="p")),
                  want["p"], f"async p step {step}")
            hq = hvd.allreduce_async(xs["q"], op=hvd.Sum, name="q")
            hr = hvd.allreduce_async(xs["r"], op=hvd.Sum, name="r")
            first, second = (hr, hq) if step % 2 else (hq, hr)
            got = {id(first): hvd.synchronize(first), id(second): hvd.synchronize(second)}
            check(got[id(hq)], want["q"], f"async q step {step}")
            check(got[id(hr)], want["r"], f"async r step {step}")
            out = np.empty(33, np.float32)
            h = hvd.allreduce_async(xs["p"], op=hvd.Average, name="pa", out=out)
            res = hvd.synchronize(h)
            check(out, want["p"] / N, f"async out= step {step}")
            if res is not out:
                raise AssertionError(f"rank {R}: synchronize did not return the out= array")
        say(f"rank {R} async ok")
    elif case == "release":
        # A finished request's result is the caller's alone: once dropped, nothing in hvdcore
        # keeps it alive (a kept result pins its pooled block, and later results are fresh
        # memory). Names on the coordinator path (step 0) and the cached path; blocking,
        # async and grouped calls; 64 KiB, a pooled size.
        import gc
        import weakref

        x = np.full(16384, float(R + 1), np.float32)
        want = np.full(16384, N * (N + 1) / 2, np.float32)
        for step in range(4):
            got = [hvd.allreduce(x, op=hvd.Sum, name="rel.blocking"),
                   hvd.synchronize(hvd.allreduce_async(x, op=hvd.Sum, name="rel.async")),
                   *hvd.grouped_allreduce([x, x], op=hvd.Sum, name="rel.grouped")]
            for g in got:
                check(g, want, f"release step {step}")
            refs = [weakref.ref(g) for g in got]
            del got, g
            gc.collect()
            alive = sum(r() is not None for r in refs)
            if alive:
                raise AssertionError(f"rank {R}: step {step}: {alive} dropped results still alive")
        say(f"rank {R} release ok")
    elif case == "batch":
        # hvdcore.ops.allreduce_batch_async (the DistributedOptimizer's step) and repeated in-place
        # allreduce_async calls: the remembered checks are reused step after step; every change
        # of an array goes back through the checks, and a bad one fails on every rank without
        # harming the next step. Batches pass the same names tuple object step after step (the
        # core remembers a tuple's whole batch), while the op, a scale factor, a shape and a dtype
        # change under it.
        from hvdcore.ops import allreduce_batch_async

        specs = {"g.a": ((7,), np.float32, dict(op=hvd.Average)),
                 "g.b": ((3, 5), np.float64, dict(op=hvd.Sum, prescale_factor=0.5,
                                                    postscale_factor=4.0)),
                 "g.c": ((1000,), np.float32, dict(op=hvd.Average))}
        tuples: dict[tuple[str, ...], tuple[str, ...]] = {}

        def kwargs(nm: str, step: int) -> dict:
            kw = dict(specs[nm][2])
            if nm == "g.b" and step % 5 == 4:
                kw["postscale_factor"] = 2.0  # same names tuple, another scale factor
            if nm != "g.b" and step % 7 == 6:
                kw["op"] = hvd.Sum  # same names tuple, another op
            return kw

        def want(nm: str, step: int, shape: tuple[int, ...], dtype: type) -> np.ndarray:
            parts = [value(step, r, shape, len(nm)).astype(dtype) for r in range(N)]
            kw = kwargs(nm, step)
            if nm == "g.b":
                return sum(p * 0.5 for p in parts) * kw["postscale_factor"]
            return sum(parts) / (1 if kw["op"] is hvd.Sum else N)

        def batch(names: list[str], arrays: dict[str, np.ndarray], step: int) -> list:
            """One batch per distinct set of keyword arguments (a batch shares them)."""
            groups: dict[str, list[str]] = {}
            for nm in names:
                groups.setdefault(repr(sorted(specs[nm][2].items())), []).append(nm)
            return [allreduce_batch_async([arrays[nm] for nm in g],
                                          tuples.setdefault(tuple(g), tuple(g)),
                                          **kwargs(g[0], step))
                    for g in groups.values()]

        def shape_dtype(nm: str, step: int) -> tuple[tuple[int, ...], type]:
            shape, dtype, _ = specs[nm]
            if nm == "g.a" and step >= 20:
                shape = (8,)  # every rank reshapes g.a at step 20
            if nm == "g.c" and step >= 25:
                dtype = np.float64  # every rank changes g.c's dtype at step 25
            return shape, dtype

        okbad = ("g.ok", "g.bad")  # one tuple object: a remembered batch, then a bad array in it
        for step in range(40):
            arrays = {}
            for nm in specs:
                shape, dtype = shape_dtype(nm, step)
                arrays[nm] = value(step, R, shape, len(nm)).astype(dtype)
            names = list(specs)
            if (step + R) % 2:
                names.reverse()  # ranks batch in different orders
            if step % 3 == 2:
                handles = [hvd.allreduce_async(arrays[nm], name=nm, out=arrays[nm],
                                               **kwargs(nm, step)) for nm in names]
            else:
                handles = batch(names, arrays, step)
            for h in handles:
                hvd.synchronize(h)
            for nm in specs:
                check(arrays[nm], want(nm, step, *shape_dtype(nm, step)), f"{nm} step {step}")
            ok = value(step, R, (4,), 9)
            if step < 30 or step in (31, 32, 34):
                second = value(step, R, (6,), 8)
                hvd.synchronize(allreduce_batch_async([ok, second], okbad, op=hvd.Sum))
                check(second, sum(value(step, r, (6,), 8) for r in range(N)), "g.bad, a good one")
            elif step in (30, 33):  # non-contiguous, then read-only, in the remembered batch
                second = np.zeros((6, 2), np.float32)[:, 0] if step == 30 else np.zeros(6, np.float32)
                second.flags.writeable = step == 30
                try:
                    hvd.synchronize(allreduce_batch_async([ok, second], okbad, op=hvd.Sum))
                    raise AssertionError("a non-contiguous or read-only in-place array must be refused")
                except hvd.ArgumentError as exc:
                    say(f"rank {R} refused {'non-contiguous' if step == 30 else 'read-only'}: {exc}")
                    hvd.synchronize(exc.submitted)  # the array before the bad one (in flight)
                # the array checked before the bad one was still submitted, and completed
                check(hvd.allreduce(value(step, R, (2,), 9), name="after.bad", op=hvd.Sum),
                      sum(value(step, r, (2,), 9) for r in range(N)), "after the bad batch")
            if step <= 34:
                check(ok, sum(value(step, r, (4,), 9) for r in range(N)), "g.ok, the batch's first")
            if step == 35:  # g.c in float64 on rank 0 only: a mismatch on every rank
                arr = value(step, R, (1000,), 3).astype(np.float64 if R == 0 else np.float32)
                try:
                    hvd.synchronize(allreduce_batch_async([arr], ["g.c"], op=hvd.Average))
                    if N > 1:
                        raise AssertionError("a dtype that differs between ranks must fail")
                except hvd.MismatchError as exc:
                    say(f"rank {R} caught dtype mismatch: {exc}")
        unnamed = (None, None)  # automatic names are fresh on every call: never remembered
        for step in range(4):  # rank 0 passes one tuple object every time, the others a new one
            a, b = value(step, R, (3,), 5), value(step, R, (2,), 6)
            hvd.synchronize(allreduce_batch_async([a, b], unnamed if R == 0 else tuple([None, None]),
                                                  op=hvd.Sum))
            check(a, sum(value(step, r, (3,), 5) for r in range(N)), "unnamed batch, first")
            check(b, sum(value(step, r, (2,), 6) for r in range(N)), "unnamed batch, second")
            # an unnamed call after it pairs up only if every rank took the same automatic names
            check(hvd.allreduce(value(step, R, (4,), 7), op=hvd.Sum),
                  sum(value(step, r, (4,), 7) for r in range(N)), "unnamed call after the batch")
        if N > 1:  # a remembered batch on a process set that is then removed
            ps = hvd.add_process_set([0])
            for step in range(2):
                if R == 0:
                    x = value(step, R, (5,), 4)
                    hvd.synchronize(allreduce_batch_async([x], ("p.x",), op=hvd.Sum, process_set=ps))
                    check(x, value(step, R, (5,), 4), "a batch on a process set of rank 0")
                if step == 1:
                    hvd.remove_process_set(ps)
                    if R == 0:  # (a local check: no peer takes part in a call on a removed set)
                        try:
                            hvd.synchronize(allreduce_batch_async([x], ("p.x",), op=hvd.Sum,
                                                                  process_set=ps))
                            raise AssertionError("a removed process set must be refused")
                        except hvd.ArgumentError as exc:
                            say(f"rank {R} refused removed set: {exc}")
        say(f"rank {R} batch ok: {len(engine.cache)} cached, "
            f"{len(basics.state().batches)} batches remembered")
    elif case == "queued":
        # Several queued allreduces synchronized together (Engine.fast_queued): ranks submit in
        # different orders, dtypes fuse into separate responses, a peer is late now and then (the
        # round completes later), a new name (a miss) or a reshaped one (stale) shares the queue,
        # and grouped calls, blocking and asynchronous, take the same path.
        import time

        names = [f"q{i}" for i in range(6)]
        dtypes = {nm: (np.float64 if i % 3 == 0 else np.float32) for i, nm in enumerate(names)}
        for step in range(40):
            shapes = {nm: ((i + 2, 3) if nm == "q0" and step >= 20 else (10 * i + 1,))
                      for i, nm in enumerate(names)}
            order = names if (step + R) % 2 == 0 else names[::-1]
            if R == N - 1 and step % 7 == 1:
                time.sleep(0.03)  # a late peer: the others' rounds complete only later
            arrays = {nm: value(step, R, shapes[nm], i).astype(dtypes[nm])
                      for i, nm in enumerate(names)}
            handles = {nm: hvd.allreduce_async(arrays[nm], name=nm, op=hvd.Sum) for nm in order}
            if step % 5 == 3:  # a name never seen before shares the queue
                handles[f"new{step}"] = hvd.allreduce_async(np.full(3, R, np.int32),
                                                            name=f"new{step}", op=hvd.Sum)
            for nm in sorted(handles, reverse=bool(step % 2)):
                got = hvd.synchronize(handles[nm])
                if nm.startswith("new"):
                    check(got, np.full(3, N * (N - 1) // 2, np.int32), f"{nm}")
                    continue
                i = names.index(nm)
                want = sum(value(step, r, shapes[nm], i).astype(dtypes[nm]) for r in range(N))
                check(got, want, f"{nm} step {step}")
            group = [value(step, R, (5,), 20 + k) for k in range(3)]
            want_group = [sum(value(step, r, (5,), 20 + k) for r in range(N)) / N for k in range(3)]
            if step % 2:
                got_group = hvd.grouped_allreduce(group, name="grp")
            else:
                got_group = hvd.synchronize(hvd.grouped_allreduce_async(group, name="grp"))
            for k in range(3):
                check(got_group[k], want_group[k], f"group part {k} step {step}")
        say(f"rank {R} queued ok: {len(engine.cache)} cached")

    elif case == "checked":
        # One name called again with other arguments each time: a remembered check
        # (hvdcore.ops._allreduce_meta) must never stand in for a call it does not describe.
        x = value(0, R, (6,), 1)
        xs = [value(0, r, (6,), 1) for r in range(N)]
        total = sum(xs)
        for _ in range(3):
            check(hvd.allreduce(x, name="m", op=hvd.Sum), total, "sum")
        check(hvd.allreduce(x, name="m", op=hvd.Average), total / N, "average after sum")
        check(hvd.allreduce(x, name="m"), total / N, "default op")
        check(hvd.allreduce(x, name="m", op=hvd.Sum, prescale_factor=2.0), 2 * total, "prescale")
        check(hvd.allreduce(x, name="m", op=hvd.Sum, postscale_factor=0.5), total / 2, "postscale")
        check(hvd.allreduce(x.astype(np.float64), name="m", op=hvd.Sum), total, "float64")
        check(hvd.allreduce(x[:4], name="m", op=hvd.Sum), total[:4], "another shape")
        wide = np.stack([x, x], axis=1)[:, 0]  # non-contiguous view of x's values
        check(hvd.allreduce(wide, name="m", op=hvd.Sum), total, "non-contiguous")
        ps = hvd.add_process_set([0]) if N > 1 else None  # (the world itself cannot be added)
        if ps is not None and R == 0:
            check(hvd.allreduce(x, name="m", op=hvd.Sum, process_set=ps), x, "process set")
        refuses_bad_arguments(lambda **bad: hvd.allreduce(x, name="m", **bad))
        if ps is not None:
            hvd.remove_process_set(ps)
            if R == 0:  # (a local check: no peer takes part in a call on a removed set)
                try:
                    hvd.allreduce(x, name="m", op=hvd.Sum, process_set=ps)
                    raise AssertionError("a removed process set must be refused")
                except hvd.ArgumentError as exc:
                    say(f"rank {R} refused removed set: {exc}")
        y = x.copy()
        hvd.allreduce(y, name="m", op=hvd.Sum, out=y)
        hvd.allreduce(y, name="m", op=hvd.Sum, out=y)
        check(y, N * total, "in place twice")
        out = np.zeros_like(x)
        for _ in range(2):
            got = hvd.allreduce(x, name="m", op=hvd.Sum, out=out)
            check(got, total, "out=") if got is out else say("out= not returned")
        big = np.concatenate([x, np.zeros(6, np.float32)])
        for shift in (1, 3, 5):  # (MPI forbids aliased buffers: the input must be copied first)
            big[:6] = x
            check(hvd.allreduce(big[:6], name="m", op=hvd.Sum, out=big[shift:shift + 6]), total,
                  f"out= overlapping the input by {6 - shift}")
        frozen = np.zeros_like(x)
        frozen.flags.writeable = False
        for label, bad_out in (("shape", np.zeros(5, np.float32)), ("dtype", np.zeros(6)),
                               ("read-only", frozen)):
            try:
                hvd.allreduce(x, name="m", op=hvd.Sum, out=bad_out)
                raise AssertionError(f"out= of another {label} must be refused")
            except hvd.ArgumentError as exc:
                say(f"rank {R} refused out= {label}: {exc}")
        check(hvd.allreduce(x, name="m", op=hvd.Sum), total, "healthy after")
        say(f"rank {R} checked ok")

    elif case == "grouped_checked":
        # One grouped name called again with other arguments each time: the remembered checks of
        # a named group (hvdcore.ops.grouped_allreduce_async) must never stand in for another call.
        xs = [[value(1, r, (6,), k) for k in range(3)] for r in range(N)]
        mine = xs[R]
        total = [sum(xs[r][k] for r in range(N)) for k in range(3)]

        def grouped(arrays, want, what, **kw):
            got = hvd.grouped_allreduce(arrays, name="g", **kw)
            if len(got) != len(want):
                raise AssertionError(f"rank {R}: {what}: {len(got)} results, {len(want)} expected")
            for k, (a, w) in enumerate(zip(got, want, strict=True)):
                if a.dtype != w.dtype:
                    raise AssertionError(f"rank {R}: {what} part {k}: dtype {a.dtype}, not {w.dtype}")
                check(a, w, f"{what} part {k}")

        for _ in range(3):
            grouped(mine, total, "sum", op=hvd.Sum)
        grouped(tuple(mine), total, "a tuple", op=hvd.Sum)
        grouped(mine, [t / N for t in total], "average after sum", op=hvd.Average)
        grouped(mine, [t / N for t in total], "default op")
        grouped(mine, total, "sum again", op=hvd.Sum)
        grouped(mine, [2 * t for t in total], "prescale", op=hvd.Sum, prescale_factor=2.0)
        grouped(mine, total, "sum after prescale", op=hvd.Sum)
        grouped(mine, [t / 2 for t in total], "postscale", op=hvd.Sum, postscale_factor=0.5)
        grouped(mine, total, "sum after postscale", op=hvd.Sum)
        total64 = [sum(xs[r][k].astype(np.float64) for r in range(N)) for k in range(3)]
        grouped([a.astype(np.float64) for a in mine], total64, "float64", op=hvd.Sum)
        grouped([mine[0][:4], *mine[1:]], [total[0][:4], *total[1:]], "another shape", op=hvd.Sum)
        grouped(mine[:2], total[:2], "fewer parts", op=hvd.Sum)
        wide = [np.stack([a, a], axis=1)[:, 0] for a in mine]  # non-contiguous views
        grouped(wide, total, "non-contiguous", op=hvd.Sum)
        grouped(mine[:1], total[:1], "one part", op=hvd.Sum)
        grouped(wide[:1], total[:1], "one non-contiguous part", op=hvd.Sum)
        outs = [np.zeros_like(a) for a in mine]
        got = hvd.grouped_allreduce(mine, name="g", op=hvd.Sum, out=outs)
        for k in range(3):
            check(outs[k], total[k], f"out= part {k}")
            if got[k] is not outs[k]:
                say(f"out= part {k} not returned")
        ps = hvd.add_process_set([0]) if N > 1 else None
        if ps is not None and R == 0:
            grouped(mine, mine, "process set", op=hvd.Sum, process_set=ps)
        refuses_bad_arguments(lambda **bad: hvd.grouped_allreduce(mine, name="g", **bad))
        try:
            hvd.grouped_allreduce([mine[0], mine[1].astype(np.complex64)], name="g", op=hvd.Sum)
            raise AssertionError("a complex part must be refused")
        except hvd.ArgumentError as exc:
            say(f"rank {R} refused dtype: {exc}")
        if ps is not None:
            hvd.remove_process_set(ps)
            if R == 0:
                try:
                    hvd.grouped_allreduce(mine, name="g", op=hvd.Sum, process_set=ps)
                    raise AssertionError("a removed process set must be refused")
                except hvd.ArgumentError as exc:
                    say(f"rank {R} refused removed set: {exc}")
        grouped(mine, total, "healthy after", op=hvd.Sum)
        grouped(mine, total, "healthy again", op=hvd.Sum)
        say(f"rank {R} grouped checked ok")

    else:
        raise SystemExit(f"unknown case {case}")
hvd.shutdown()
