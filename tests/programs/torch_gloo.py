"""torch CPU tensors on the engine-driven torch.distributed Gloo data plane.

Run with ``HVDCORE_CPU_OPERATIONS=gloo``. argv[1] (each section prints its own OK line):
- ``engine`` (then ``steady``, in the same launch): the plane is reported, a grouped allreduce of 10 tensors is one Gloo call,
  a name submitted for different data planes is a MismatchError on every rank (and the next
  call works), process sets get their own Gloo groups, timeline spans name GLOO_* operations;
- ``steady``: repeated named allreduces (the steady route, the plane's bound call) against
  references computed here, new results kept intact, in-place results, then a new tensor
  under a known name, scale factors, a timeline, a shape mismatch on a steady name;
- ``reinit`` (after ``steady``, in the same launch): ``shutdown()`` + ``init()`` starts the
  planes clean (a new plane, the remembered in-place buffers gone, steady names work anew);
- ``stall``: rank 1 never submits 'skipped' (sleeps argv[2] seconds): stall warning, then
  StallError and the job ends;
- ``kill``: rank 1 SIGKILLs itself while the others are in Gloo allreduces.
"""

import json
import os
import signal
import sys
import tempfile
import time

import numpy as np
import torch

import hvdcore
import hvdcore.torch as hvd
from hvdcore.torch import dataplanes

hvd.init()
R, N = hvd.rank(), hvd.size()
checks = 0


def check(cond: bool, what: str) -> None:
    global checks
    if not cond:
        raise AssertionError(f"rank {R}: {what}")
    checks += 1


def section_engine() -> None:
    check(hvd.cpu_operations().startswith("gloo"), hvd.cpu_operations())
    gloo = dataplanes.backend("gloo")
    check(gloo is not None, "no gloo plane registered")

    # fusion: a group reaches the engine as one batch on every rank, so it is one Gloo call
    tensors = [torch.full((100 + i,), float(R + i)) for i in range(10)]
    before = gloo.calls["allreduce"]
    got = hvd.grouped_allreduce(tensors, op=hvd.Sum, name="fused")
    calls = gloo.calls["allreduce"] - before
    check(calls == 1, f"10 grouped tensors took {calls} Gloo allreduces, expected 1")
    for i, g in enumerate(got):
        want = sum(float(r + i) for r in range(N))
        check(torch.equal(g, torch.full((100 + i,), want)), f"fused tensor {i}: {g[:3]}")

    # the same name for a host NumPy array on rank 0 and a Gloo tensor elsewhere
    if N > 1:
        try:
            if R == 0:
                hvdcore.allreduce(np.ones(4, np.float32), name="where", op=hvdcore.Sum)
            else:
                hvd.allreduce(torch.ones(4), name="where", op=hvd.Sum)
            check(False, "a data-plane mismatch went through")
        except hvdcore.MismatchError as exc:
            check("mismatched device" in str(exc) and "gloo" in str(exc), str(exc))
    after = hvd.allreduce(torch.ones(4), name="after-mismatch", op=hvd.Sum)
    check(torch.equal(after, torch.full((4,), float(N))), f"after a mismatch: {after}")

    # process sets: each gets its own Gloo group, made on every rank in the same order
    if N > 1:
        members = [0, N - 1] if N > 2 else [1]  # (a set of every rank would be the world)
        ps = hvd.add_process_set(members)
        if R in members:
            s = hvd.allreduce(torch.tensor([float(R)]), op=hvd.Sum, process_set=ps)
            check(s.item() == float(sum(members)), f"set allreduce {s}")
            g = hvd.allgather(torch.tensor([R]), process_set=ps)
            check(g.tolist() == members, f"set allgather {g}")
        hvd.remove_process_set(ps)

    # timeline spans name the backend operation
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "tl.json")
        hvd.start_timeline(path)
        hvd.allreduce(torch.ones(8), name="tl.ar")
        hvd.allgather(torch.ones(2, 2), name="tl.ag")
        hvd.broadcast(torch.ones(3), 0, name="tl.bc")
        hvd.reducescatter(torch.ones(N * 2), name="tl.rs")
        hvdcore.allreduce(np.ones(8), name="tl.host")
        hvd.stop_timeline()
        if R == 0:
            with open(path) as f:
                text = f.read()
            events = json.loads(text if text.rstrip().endswith("]") else text.rstrip(",\n")
                                + "]")
            names = {e.get("name") for e in events if isinstance(e, dict)}
            for want in ("GLOO_ALLREDUCE", "GLOO_ALLGATHER", "GLOO_BCAST",
                         "GLOO_REDUCESCATTER", "MPI_ALLREDUCE"):
                check(want in names, f"timeline lacks {want}: {sorted(n for n in names if n)}")


def _rank_input(r: int, step: int, n: int, dtype: torch.dtype) -> torch.Tensor:
    """Rank ``r``'s input at ``step``: small integers, exact in every dtype and product."""
    return ((torch.arange(n) % 5) + (r + 1) * (step % 3 + 1)).to(dtype)


def _reference(step: int, n: int, dtype: torch.dtype, op: str) -> torch.Tensor:
    """The reduction of every rank's input, computed here in float64."""
    xs = torch.stack([_rank_input(r, step, n, torch.float64) for r in range(N)])
    want = {"sum": xs.sum(0), "average": xs.sum(0) / N, "min": xs.min(0).values,
            "max": xs.max(0).values, "prod": xs.prod(0)}[op]
    return want


def section_steady() -> None:
    """Repeated named calls, which take the engine's steady route and the plane's bound call
    from their third call on, give what a reference computed here gives, step after step:
    new results (fresh and pooled sizes, each kept intact while later calls run) and in-place
    results; then a new tensor under a known name, a postscaled and a prescaled call, a
    timeline started between steady calls, and (2+ ranks) a shape mismatch on a steady name,
    raised on every rank, after which the name works again."""
    ops = {"sum": hvd.Sum, "average": hvd.Average, "min": hvd.Min, "max": hvd.Max,
           "prod": hvd.Product}
    for dtype in (torch.float32, torch.float64, torch.int32, torch.int64, torch.float16):
        for n in (7, 12_000):  # (12,000 elements: a result the plane's pool keeps)
            for opname, op in ops.items():
                if opname == "average" and not dtype.is_floating_point:
                    continue
                if dtype is torch.float16 and opname not in ("sum", "max"):
                    continue
                x, y, kept = torch.empty(n, dtype=dtype), torch.empty(n, dtype=dtype), []
                for step in range(6):
                    want = _reference(step, n, dtype, opname)
                    x.copy_(_rank_input(R, step, n, dtype))
                    got = hvd.allreduce(x, name=f"st.{dtype}.{n}.{opname}", op=op)
                    check(got.dtype is dtype and got.shape == x.shape, f"{got.dtype} {got.shape}")
                    kept.append((got, want))
                    y.copy_(_rank_input(R, step, n, dtype))
                    back = hvd.allreduce_(y, name=f"st_.{dtype}.{n}.{opname}", op=op)
                    check(back is y, "allreduce_ returned another tensor")
                    check(torch.allclose(y.double(), want, rtol=1e-6),
                          f"in place {dtype} n={n} {opname} step {step}: {y[:4]} vs {want[:4]}")
                for step, (got, want) in enumerate(kept):
                    check(torch.allclose(got.double(), want, rtol=1e-6),
                          f"{dtype} n={n} {opname} step {step} (kept): {got[:4]} vs {want[:4]}")
    # another tensor (other memory) under a name the steady route knows
    for step in range(4):
        t = _rank_input(R, step, 9, torch.float32).clone()
        got = hvd.allreduce(t, name="st.fresh", op=hvd.Sum)
        check(torch.equal(got.double(), _reference(step, 9, torch.float32, "sum")), f"{got}")
    for step in range(4):  # a postscale (the bound call scales) and a prescale (general path)
        x = _rank_input(R, step, 9, torch.float32)
        got = hvd.allreduce(x, name="st.post", op=hvd.Sum, postscale_factor=0.25)
        check(torch.equal(got.double(), _reference(step, 9, x.dtype, "sum") * 0.25), f"{got}")
        got = hvd.allreduce(x, name="st.pre", op=hvd.Sum, prescale_factor=2.0)
        check(torch.equal(got.double(), _reference(step, 9, x.dtype, "sum") * 2), f"{got}")
    with tempfile.TemporaryDirectory() as tmp:
        x = _rank_input(R, 0, 9, torch.float32)
        for step in range(6):
            if step == 3:
                hvd.start_timeline(os.path.join(tmp, "steady.json"))
            got = hvd.allreduce(x, name="st.timeline", op=hvd.Sum)
            check(torch.equal(got.double(), _reference(0, 9, x.dtype, "sum")), f"{got}")
        hvd.stop_timeline()
    if N > 1:
        x = torch.ones(4)
        for _ in range(4):
            hvd.allreduce_(x.fill_(1.0), name="st.mismatch", op=hvd.Sum)
        try:
            hvd.allreduce_(torch.ones(5 if R == 0 else 4), name="st.mismatch", op=hvd.Sum)
            check(False, "a shape mismatch on a steady name went through")
        except hvdcore.MismatchError as exc:
            check("mismatched shape" in str(exc), str(exc))
        for _ in range(3):
            hvd.allreduce_(x.fill_(1.0), name="st.mismatch", op=hvd.Sum)
            check(torch.equal(x, torch.full((4,), float(N))), f"after the mismatch: {x}")


def section_reinit() -> None:
    """``shutdown()`` then ``init()`` in the same processes (what an elastic reset does) starts
    the planes clean: a new Gloo plane is registered (the old one is not reused), the steady
    names of the first engine (plain and in place, whose plane buffers were remembered) give
    the reference again from their first call, fusion is one call on the new plane, and a
    process set gets a group of the new process group."""
    old, planes = dataplanes.backend("gloo"), dataplanes.current()
    check(planes.inplace_buffers != {}, "no in-place plane buffer was remembered before")
    hvd.shutdown()
    check(dataplanes.backend("gloo") is None and planes.cpu is None
          and not planes.inplace_buffers, "the planes outlived shutdown()")
    hvd.init()
    new = dataplanes.backend("gloo")
    check(new is not None and new is not old, "init() after shutdown() reused the old plane")
    check(hvd.cpu_operations().startswith("gloo"), hvd.cpu_operations())
    for step in range(5):
        want = _reference(step, 12_000, torch.float32, "sum")
        got = hvd.allreduce(_rank_input(R, step, 12_000, torch.float32),
                            name="st.torch.float32.12000.sum", op=hvd.Sum)
        check(torch.equal(got.double(), want), f"reinit step {step}: {got[:4]}")
        y = _rank_input(R, step, 12_000, torch.float32)
        hvd.allreduce_(y, name="st_.torch.float32.12000.sum", op=hvd.Sum)
        check(torch.equal(y.double(), want), f"reinit in place step {step}: {y[:4]}")
    tensors = [torch.full((50 + i,), float(R + i)) for i in range(4)]
    before = new.calls["allreduce"]
    got = hvd.grouped_allreduce(tensors, op=hvd.Sum, name="fused.again")
    check(new.calls["allreduce"] - before == 1, "a group after re-init was not one call")
    for i, g in enumerate(got):
        check(torch.equal(g, torch.full((50 + i,), float(sum(r + i for r in range(N))))), f"{g}")
    if N > 1:
        members = [0, N - 1] if N > 2 else [1]
        ps = hvd.add_process_set(members)
        if R in members:
            s = hvd.allreduce(torch.tensor([float(R + 1)]), op=hvd.Sum, process_set=ps)
            check(s.item() == float(sum(m + 1 for m in members)), f"set after re-init {s}")
        hvd.remove_process_set(ps)


def section_stall() -> None:
    hvd.allreduce(torch.ones(2), name="warmup")
    if R == 1:
        time.sleep(float(sys.argv[2]))
        print("rank 1 woke up", flush=True)
        return
    try:
        hvd.allreduce(torch.ones(2), name="skipped")
    except hvdcore.StallError as exc:
        print(f"rank {R} got StallError: {exc}", flush=True)
        raise


def section_kill() -> None:
    x = torch.ones(1 << 16)
    for step in range(1_000_000):
        if R == 1 and step == 20:
            os.kill(os.getpid(), signal.SIGKILL)
        hvd.allreduce(x, name="grad")


SECTIONS = {"engine": (section_engine, section_steady, section_reinit), "steady": (section_steady,),
            "stall": (section_stall,), "kill": (section_kill,)}
for section in SECTIONS[sys.argv[1]]:
    section()
    print(f"torch-gloo {section.__name__[len('section_'):]} rank={R} size={N} checks={checks} OK",
          flush=True)
hvd.shutdown()
