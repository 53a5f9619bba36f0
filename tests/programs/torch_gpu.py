"""Device tensors through hvdcore.torch's engine-driven data planes (tests/test_torch_gpu.py).

argv[1] picks what this run expects:

- ``nccl`` / ``rccl`` (one GPU per rank; np 1 on a 1-GPU machine): ``hvd.gpu_operations()`` is
  the plane; every collective on CUDA tensors against a CPU reference, results on the tensor's
  device; a grouped allreduce of 10 tensors is one NCCL call (fusion); a tensor written on a
  side stream and reduced under ``torch.cuda.stream(s)`` is read only once written; process
  sets; the timeline shows NCCL_* spans; one DistributedOptimizer step.
- ``staging`` (run with ``HVDCORE_GPU_OPERATIONS=mpi``; any number of ranks on one GPU):
  ``gpu_operations()`` starts with ``mpi-host-staging`` (``mpi-cuda-aware`` where every rank's
  MPI is CUDA-aware); the same checks, MPI_* spans.
- ``duplicate`` (np >= 2 on one GPU): no knob, ``hvd.init()`` succeeds and CPU tensors work;
  a device tensor raises CapabilityError on every rank, naming the ranks, the GPU and
  ``HVDCORE_GPU_OPERATIONS=mpi``. With ``HVDCORE_GPU_OPERATIONS=nccl``, ``init()`` raises it.
- ``dryrun`` (run with ``HVDCORE_CPU_OPERATIONS=gloo``; no GPU needed): the same collective
  checks on CPU tensors through the Gloo plane, so CI keeps this program's references honest.

Without a GPU every mode but ``dryrun`` prints ``torch-gpu SKIP`` and exits 0 before
``hvd.init()``. Each rank ends with ``torch-gpu <mode> rank=R size=N checks=C OK``.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

import torch

import hvdcore
import hvdcore.torch as hvd
from hvdcore.torch import dataplanes

MODE = sys.argv[1]
if MODE != "dryrun" and not torch.cuda.is_available():
    print(f"torch-gpu SKIP {MODE}: no GPU visible to torch", flush=True)
    sys.exit(0)
CHECKS = 0


def check(cond: bool, what: str) -> None:
    global CHECKS
    if not cond:
        raise AssertionError(f"rank {os.environ.get('OMPI_COMM_WORLD_RANK', '?')}: {what}")
    CHECKS += 1


def data(r: int, shape: tuple[int, ...], salt: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(1000 * salt + r + 7)
    return torch.randn(shape, generator=g, dtype=torch.float64)


def same(got: torch.Tensor, want: torch.Tensor, dev: torch.device, what: str) -> None:
    check(isinstance(got, torch.Tensor), f"{what}: got {type(got)}")
    check(got.device == dev, f"{what}: result on {got.device}, expected {dev}")
    check(got.shape == want.shape, f"{what}: shape {tuple(got.shape)} != {tuple(want.shape)}")
    check(got.dtype == want.dtype, f"{what}: dtype {got.dtype} != {want.dtype}")
    tol = 1e-2 if want.dtype == torch.float16 else 1e-5  # NCCL sums float16 in float16
    check(torch.allclose(got.cpu().double(), want.double(), rtol=tol, atol=tol),
          f"{what}: {got.flatten()[:4].tolist()} vs {want.flatten()[:4].tolist()}")


def collectives(dev: torch.device, plane: str | None) -> None:
    """Every collective on tensors of ``dev`` against CPU references; ``plane`` is the
    torch.distributed plane expected to carry them (None: host staging over MPI)."""
    me, n = hvd.rank(), hvd.size()
    xs = [data(r, (4, 3)) for r in range(n)]
    x = xs[me].to(dev)
    same(hvd.allreduce(x, op=hvd.Sum, name="ar.sum"), sum(xs), dev, "allreduce Sum")
    same(hvd.allreduce(x, name="ar.avg"), sum(xs) / n, dev, "allreduce Average")
    x32 = [v.float() for v in xs]
    same(hvd.allreduce(x32[me].to(dev), op=hvd.Min, name="ar.min"), torch.stack(x32).amin(0),
         dev, "allreduce float32 Min")
    t = x.clone()
    out = hvd.allreduce_(t, op=hvd.Max, name="ar.inplace")
    check(out is t, "allreduce_ returned another tensor")
    same(t, torch.stack(xs).amax(0), dev, "allreduce_ Max")
    h = hvd.allreduce_async(x, op=hvd.Sum, name="ar.async")
    same(hvd.synchronize(h), sum(xs), dev, "allreduce_async + synchronize")
    half = [v.half() for v in xs]
    same(hvd.allreduce(half[me].to(dev), op=hvd.Sum, name="ar.half"),
         torch.stack([v.float() for v in half]).sum(0).half(), dev, "allreduce float16")

    # fused: a grouped allreduce reaches the engine as one batch, hence one plane call
    group = [[data(r, (50 + i,), salt=i) for r in range(n)] for i in range(10)]
    backend = dataplanes.backend(plane) if plane else None
    before = backend.calls["allreduce"] if backend else 0
    got = hvd.grouped_allreduce([g[me].to(dev) for g in group], op=hvd.Sum, name="grouped")
    if backend is not None:
        calls = backend.calls["allreduce"] - before
        check(calls == 1, f"10 grouped tensors took {calls} {plane} allreduces, expected 1")
    for i, (g, want) in enumerate(zip(got, group, strict=True)):
        same(g, sum(want), dev, f"grouped tensor {i}")

    # allgather with uneven first dimensions (rank r contributes r + 1 rows)
    parts = [data(r, (r + 1, 2), salt=20) for r in range(n)]
    same(hvd.allgather(parts[me].to(dev), name="ag.uneven"), torch.cat(parts), dev,
         "allgather uneven")
    ints = [torch.arange(r + 2, dtype=torch.int64) + 10 * r for r in range(n)]
    got = hvd.allgather(ints[me].to(dev), name="ag.int")
    check(got.device == dev and torch.equal(got.cpu(), torch.cat(ints)), f"allgather int {got}")

    root = n - 1
    same(hvd.broadcast(x, root, name="bc"), xs[root], dev, "broadcast")
    b = x.clone()
    hvd.broadcast_(b, 0, name="bc.inplace")
    same(b, xs[0], dev, "broadcast_")

    # alltoall with splits: rank r sends (r + j) % 3 rows to rank j
    def rows(src: int, dst: int) -> int:
        return (src + dst) % 3

    def sent(src: int) -> torch.Tensor:
        return data(src, (sum(rows(src, j) for j in range(n)), 2), salt=30)

    def block(src: int, dst: int) -> torch.Tensor:
        start = sum(rows(src, j) for j in range(dst))
        return sent(src)[start:start + rows(src, dst)]

    splits = torch.tensor([rows(me, j) for j in range(n)], dtype=torch.int32)
    res, recv = hvd.alltoall(sent(me).to(dev), splits=splits, name="a2a.splits")
    same(res, torch.cat([block(r, me) for r in range(n)]), dev, "alltoall with splits")
    check(recv.tolist() == [rows(r, me) for r in range(n)], f"alltoall received splits {recv}")
    even = hvd.alltoall(data(me, (n, 3), salt=31).to(dev), name="a2a.even")
    same(even, torch.cat([data(r, (n, 3), salt=31)[me:me + 1] for r in range(n)]), dev,
         "alltoall even")

    # reducescatter with a first dimension that does not divide by n (Horovod's split: the
    # first (rows % n) ranks get one row more)
    total = 2 * n + 1
    full = [data(r, (total, 3), salt=40) for r in range(n)]
    counts = [total // n + (1 if i < total % n else 0) for i in range(n)]
    start = sum(counts[:me])
    same(hvd.reducescatter(full[me].to(dev), op=hvd.Sum, name="rs.uneven"),
         sum(full)[start:start + counts[me]], dev, "reducescatter uneven")

    # a process set: its own group on the plane. At 1 rank the only set is the global one
    # (a set of every rank already exists); the dry run at 2-3 ranks covers subset groups.
    members = list(range(n)) if n == 1 else ([1] if n == 2 else [0, n - 1])
    ps = hvd.global_process_set if n == 1 else hvd.add_process_set(members)
    if me in members:
        s = hvd.allreduce(torch.tensor([float(me)], device=dev), op=hvd.Sum, process_set=ps,
                          name="ps.ar")
        same(s, torch.tensor([float(sum(members))], dtype=torch.float32), dev,
             "process-set allreduce")
        g = hvd.allgather(torch.tensor([me], device=dev), process_set=ps, name="ps.ag")
        check(g.cpu().tolist() == members, f"process-set allgather {g}")
    if ps is not hvd.global_process_set:
        hvd.remove_process_set(ps)


def side_stream(dev: torch.device) -> None:
    """A producer on a non-default stream: the collective must wait for its kernels."""
    n = hvd.size()
    s = torch.cuda.Stream(dev)
    for trial in range(3):
        with torch.cuda.stream(s):
            x = torch.zeros(1 << 20, device=dev)
            torch.cuda._sleep(50_000_000)  # keeps s busy (~tens of ms) before the write
            x.fill_(float(hvd.rank() + 1 + trial))
            y = hvd.allreduce(x, op=hvd.Sum, name=f"side.{trial}")
            z = y * 2  # consumed on s: must see the finished result
        s.synchronize()
        want = 2 * sum(float(r + 1 + trial) for r in range(n))
        check(torch.all(z == want).item(), f"side-stream trial {trial}: {z[:3].tolist()} "
              f"!= {want}")


def timeline_names(dev: torch.device) -> set[str]:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "tl.json")
        hvd.start_timeline(path)
        hvd.allreduce(torch.ones(8, device=dev), name="tl.ar")
        hvd.allgather(torch.ones(2, 2, device=dev), name="tl.ag")
        hvd.broadcast(torch.ones(3, device=dev), 0, name="tl.bc")
        hvd.stop_timeline()
        hvd.barrier()
        if hvd.rank() != 0:
            return set()
        with open(path) as f:
            text = f.read()
    events = json.loads(text if text.rstrip().endswith("]") else text.rstrip(",\n") + "]")
    return {e.get("name") for e in events if isinstance(e, dict) and e.get("name")}


def optimizer_step(dev: torch.device) -> None:
    model = torch.nn.Linear(3, 2).to(dev)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    model(data(hvd.rank(), (4, 3)).float().to(dev)).sum().backward()
    opt.step()
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    every = hvd.allgather(flat.reshape(1, -1), name="opt.params")
    check(torch.equal(every, every[:1].expand_as(every)), "parameters differ after a step")


def device_name(dev: torch.device) -> list[str]:
    """How an error may name this GPU: its uuid, its physical index, its torch label."""
    props = torch.cuda.get_device_properties(dev)
    uuid = str(getattr(props, "uuid", "") or "").removeprefix("GPU-")
    return [v for v in (uuid, f"GPU {dev.index}", str(dev)) if v]


def clash_named(msg: str, n: int, dev: torch.device) -> None:
    """The shared-GPU error names every rank, the GPU and the host-staging knob."""
    check(str(list(range(n))) in msg, f"the error does not name ranks {list(range(n))}: {msg}")
    check(any(v in msg for v in device_name(dev)),
          f"the error does not name the GPU ({device_name(dev)}): {msg}")
    check("HVDCORE_GPU_OPERATIONS=mpi" in msg, f"no host-staging hint: {msg}")


def duplicate() -> None:
    """Every rank on GPU 0. Forced NCCL (HVDCORE_GPU_OPERATIONS=nccl): init raises on every
    rank. Default (auto): init succeeds and CPU tensors work, as under Horovod; a device tensor
    raises CapabilityError on every rank, and the runtime stays healthy afterwards."""
    from mpi4py import MPI  # ranks from MPI: hvdcore may be down after a failed init

    me, n = MPI.COMM_WORLD.rank, MPI.COMM_WORLD.size
    torch.cuda.set_device(0)  # every rank on GPU 0, before init picks the NCCL device
    dev = torch.device("cuda", 0)
    forced = os.environ.get("HVDCORE_GPU_OPERATIONS") == "nccl"
    try:
        hvd.init()
    except hvdcore.CapabilityError as exc:
        print(f"rank {me} error: {exc}", flush=True)
        check(forced, f"init refused ranks on one GPU without HVDCORE_GPU_OPERATIONS=nccl: {exc}")
        clash_named(str(exc), n, dev)
        print(f"torch-gpu {MODE} rank={me} size={n} checks={CHECKS} OK", flush=True)
        hvd.shutdown()  # a no-op if init already shut hvdcore down
        return
    check(not forced, f"forced NCCL with ranks on one GPU went through ({hvd.gpu_operations()})")
    check(hvd.gpu_operations().startswith("refused ("), hvd.gpu_operations())
    xs = [data(r, (5,)) for r in range(n)]
    same(hvd.allreduce(xs[me], op=hvd.Sum, name="dup.cpu"), sum(xs), torch.device("cpu"),
         "CPU allreduce beside a shared GPU")
    for what, call in (("allreduce", lambda: hvd.allreduce(xs[me].to(dev), name="dup.gpu")),
                       ("broadcast", lambda: hvd.broadcast(xs[me].to(dev), 0, name="dup.b"))):
        try:
            call()
        except hvdcore.CapabilityError as exc:
            print(f"rank {me} error: {what}: {exc}", flush=True)
            clash_named(str(exc), n, dev)
        else:
            check(False, f"{what} of a tensor on the shared GPU went through")
    same(hvd.allreduce(xs[me], op=hvd.Sum, name="dup.cpu.after"), sum(xs),
         torch.device("cpu"), "CPU allreduce after the refused device tensors")
    print(f"torch-gpu {MODE} rank={me} size={n} checks={CHECKS} OK", flush=True)
    hvd.shutdown()


def main() -> None:
    if MODE == "duplicate":
        duplicate()
        return
    hvd.init()
    if MODE == "dryrun":
        dev, plane, prefix = torch.device("cpu"), "gloo", "GLOO"
        check(hvd.cpu_operations().startswith("gloo"), hvd.cpu_operations())
    else:
        torch.cuda.set_device(hvd.local_rank() % torch.cuda.device_count())
        dev = torch.device("cuda", torch.cuda.current_device())
        path = hvd.gpu_operations()
        if MODE == "staging":
            # host staging; where every rank's MPI is CUDA-aware, hvdcore hands MPI the device
            # buffers instead (a plane of its own, still MPI_* spans)
            aware = path.startswith("mpi-cuda-aware")
            plane, prefix = ("mpi-cuda" if aware else None), "MPI"
            check(aware or path.startswith("mpi-host-staging"), f"gpu_operations() is {path!r}")
            print(f"rank {hvd.rank()} device tensors take {path}", flush=True)
        else:
            plane, prefix = MODE, MODE.upper()
            check(path == MODE, f"gpu_operations() is {path!r}, expected {MODE!r}")
            check(dataplanes.backend(MODE) is not None, f"no {MODE} plane registered")
    collectives(dev, plane)
    if dev.type == "cuda":
        side_stream(dev)
    optimizer_step(dev)
    names = timeline_names(dev)
    if hvd.rank() == 0:
        for op in ("ALLREDUCE", "ALLGATHER", "BCAST"):
            check(f"{prefix}_{op}" in names, f"timeline lacks {prefix}_{op}: {sorted(names)}")
    print(f"torch-gpu {MODE} rank={hvd.rank()} size={hvd.size()} checks={CHECKS} OK",
          flush=True)
    hvd.shutdown()


main()
