"""Every hvdcore.torch collective against a torch reference computed in this one process.

Each rank can regenerate every rank's input (seeded by rank), so the reference result of a
collective -- and the reference gradient of the sum of all ranks' losses (``gradient="exact"``;
Horovod's default gradients are checked in torch_semantics.py) -- is computed with plain torch
ops here and compared with what hvdcore returns. Prints one summary line per rank.
"""

from __future__ import annotations

import sys

import torch

import hvdcore.torch as hvd
from hvdcore.torch.compression import Compressor

hvd.init()
ME, N = hvd.rank(), hvd.size()
CHECKS = 0


def data(r: int, shape: tuple[int, ...], dtype: torch.dtype = torch.float32,
         salt: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(1000 * salt + r + 17)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if dtype.is_floating_point or dtype.is_complex:
        x = torch.randn(shape, generator=g, dtype=torch.float64)
        if dtype.is_complex:
            x = torch.complex(x, torch.randn(shape, generator=g, dtype=torch.float64))
        return x.to(dtype)
    lo = 0 if dtype == torch.uint8 else -4
    return torch.randint(lo, 5, shape, generator=g).to(dtype)


def check(got: torch.Tensor, want: torch.Tensor, what: str, tol: float = 1e-5) -> None:
    global CHECKS
    assert isinstance(got, torch.Tensor), f"{what}: got {type(got)}"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != {want.dtype}"
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)} != {tuple(want.shape)}"
    assert got.device == want.device, f"{what}: device {got.device} != {want.device}"
    if want.dtype in (torch.float16, torch.bfloat16):
        tol = max(tol, 2e-2)
    if want.is_floating_point() or want.is_complex():
        ok = torch.allclose(got.to(torch.complex128 if want.is_complex() else torch.float64),
                            want.to(torch.complex128 if want.is_complex() else torch.float64),
                            rtol=tol, atol=tol)
    else:
        ok = torch.equal(got, want)
    assert ok, f"rank {ME}: {what}: got {got.flatten()[:6]} want {want.flatten()[:6]}"
    CHECKS += 1


def every(shape: tuple[int, ...], dtype: torch.dtype, salt: int = 0) -> list[torch.Tensor]:
    return [data(r, shape, dtype, salt) for r in range(N)]


# --------------------------------------------------------------------------- allreduce
REDUCE = {
    hvd.Sum: lambda xs: torch.stack(xs).sum(0),
    hvd.Average: lambda xs: torch.stack(xs).sum(0) / N,
    hvd.Min: lambda xs: torch.stack(xs).amin(0),
    hvd.Max: lambda xs: torch.stack(xs).amax(0),
    hvd.Product: lambda xs: torch.stack(xs).prod(0),
}
float_types = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
int_types = [torch.int32, torch.int64, torch.int8, torch.uint8, torch.int16]
for salt, dtype in enumerate(float_types + int_types):
    for op, ref in REDUCE.items():
        if op == hvd.Average and not dtype.is_floating_point:
            continue
        xs = every((3, 4), dtype, salt)
        want = ref([x.double() for x in xs]).to(dtype) if dtype.is_floating_point \
            else ref([x.long() for x in xs]).to(dtype)
        check(hvd.allreduce(xs[ME], op=op, name=f"ar.{dtype}.{op.name}"), want,
              f"allreduce {dtype} {op.name}", tol=1e-4)
xs = every((5,), torch.complex64, 3)
check(hvd.allreduce(xs[ME], op=hvd.Sum), torch.stack(xs).sum(0), "allreduce complex64 Sum")
xs = every((6,), torch.bool, 4)
check(hvd.allreduce(xs[ME], op=hvd.Max), torch.stack(xs).any(0), "allreduce bool Max")
check(hvd.allreduce(xs[ME], op=hvd.Min), torch.stack(xs).all(0), "allreduce bool Min")
# deprecated average=, scale factors, 0-d, empty, non-contiguous
xs = every((4, 3), torch.float64, 5)
check(hvd.allreduce(xs[ME], average=False), sum(xs), "allreduce average=False")
check(hvd.allreduce(xs[ME], op=hvd.Sum, prescale_factor=0.5, postscale_factor=3.0),
      1.5 * sum(xs), "allreduce pre/postscale")
check(hvd.allreduce(xs[ME].t()), (sum(xs) / N).t().contiguous(), "allreduce non-contiguous")
check(hvd.allreduce(torch.tensor(float(ME + 1)), op=hvd.Sum),
      torch.tensor(float(N * (N + 1) // 2)), "allreduce 0-d")
check(hvd.allreduce(torch.zeros(0, 3)), torch.zeros(0, 3), "allreduce empty")
# in place: same object, same memory (zero-copy), also for non-contiguous views
t = xs[ME].clone()
ptr = t.data_ptr()
out = hvd.allreduce_(t, op=hvd.Sum)
assert out is t and t.data_ptr() == ptr
check(t, sum(xs), "allreduce_ in place")
base = xs[ME].clone()
view = base.t()
hvd.allreduce_(view, op=hvd.Sum)
check(base, sum(xs), "allreduce_ on a non-contiguous view")
# async
h = hvd.allreduce_async(xs[ME], op=hvd.Max, name="async.max")
while not hvd.poll(h):
    pass
check(hvd.synchronize(h), torch.stack(xs).amax(0), "allreduce_async")
t = xs[ME].clone()
h = hvd.allreduce_async_(t, name="async.inplace")
assert hvd.synchronize(h) is t
check(t, sum(xs) / N, "allreduce_async_")
# compression
check(hvd.allreduce(xs[ME].float(), compression=hvd.Compression.fp16),
      (sum(xs) / N).float(), "allreduce fp16 compression", tol=1e-2)


class _Doubling(Compressor):
    """A compressor whose context is None and whose decompress still acts."""

    @staticmethod
    def compress(tensor: torch.Tensor) -> tuple[torch.Tensor, None]:
        return tensor, None

    @staticmethod
    def decompress(tensor: torch.Tensor, ctx: None) -> torch.Tensor:
        return tensor * 2


check(hvd.allreduce(xs[ME], op=hvd.Sum, compression=_Doubling), 2 * sum(xs),
      "allreduce, a compressor with ctx None")
# tensors whose NumPy view torch refuses, or that require grad: the blocking call's routing
neg = torch._neg_view(xs[ME])
assert neg.is_neg()
check(hvd.allreduce(neg, op=hvd.Sum), -sum(xs), "allreduce of a negative-bit view")
leaf = xs[ME].clone().requires_grad_()
with torch.no_grad():
    check(hvd.allreduce(leaf, op=hvd.Sum), sum(xs), "allreduce of a grad tensor, no_grad")
cplx = every((3,), torch.complex64, 21)
check(hvd.allreduce(cplx[ME].conj(), op=hvd.Sum), sum(cplx).conj(), "allreduce of a conj view")
for step in range(4):  # a repeated named call (the cached paths), new inputs each time
    check(hvd.allreduce(xs[ME] * (step + 1), name="repeat", op=hvd.Sum),
          sum(xs) * (step + 1), f"repeated allreduce {step}")
    t = xs[ME] * (step + 1)
    assert hvd.allreduce_(t, name="repeat_", op=hvd.Average) is t
    check(t, sum(xs) * (step + 1) / N, f"repeated allreduce_ {step}")

# ------------------------------------------------------------------ grouped allreduce
ga = [every((2, 3), torch.float32, 6), every((5,), torch.float64, 7), every((4,), torch.int32, 8)]
outs = hvd.grouped_allreduce([g[ME] for g in ga], op=hvd.Sum, name="grouped")
for o, g in zip(outs, ga, strict=True):
    check(o, sum(g), "grouped_allreduce")
mine = [g[ME].clone() for g in ga]
res = hvd.grouped_allreduce_(mine, op=hvd.Sum)
for o, m, g in zip(res, mine, ga, strict=True):
    assert o is m
    check(m, sum(g), "grouped_allreduce_")
outs = hvd.synchronize(hvd.grouped_allreduce_async([g[ME] for g in ga[:2]]))
for o, g in zip(outs, ga[:2], strict=True):
    check(o, sum(g) / N, "grouped_allreduce_async")
mine = [g[ME].clone() for g in ga[:2]]
hvd.synchronize(hvd.grouped_allreduce_async_(mine, op=hvd.Sum))
for m, g in zip(mine, ga[:2], strict=True):
    check(m, sum(g), "grouped_allreduce_async_")

# ------------------------------------------------------------------------- allgather
for salt, dtype in enumerate([torch.float32, torch.int64, torch.bool, torch.bfloat16,
                              torch.int16, torch.complex64]):
    parts = [data(r, (r + 1, 3), dtype, 20 + salt) for r in range(N)]
    check(hvd.allgather(parts[ME]), torch.cat(parts), f"allgather ragged {dtype}")
parts = [data(r, (r, 2), torch.float32, 30) for r in range(N)]  # rank 0 sends 0 rows
check(hvd.synchronize(hvd.allgather_async(parts[ME])), torch.cat(parts), "allgather_async")
p1 = [data(r, (2,), torch.float64, 31) for r in range(N)]
outs = hvd.grouped_allgather([parts[ME], p1[ME]])
check(outs[0], torch.cat(parts), "grouped_allgather 0")
check(outs[1], torch.cat(p1), "grouped_allgather 1")
outs = hvd.synchronize(hvd.grouped_allgather_async([p1[ME]]))
check(outs[0], torch.cat(p1), "grouped_allgather_async")

# ------------------------------------------------------------------------- broadcast
for root in range(N):
    for salt, dtype in enumerate([torch.float32, torch.uint8, torch.bfloat16, torch.bool]):
        xs = every((3, 2), dtype, 40 + salt)
        check(hvd.broadcast(xs[ME], root), xs[root], f"broadcast {dtype} root {root}")
    t = data(ME, (4,), torch.float64, 45)
    ptr = t.data_ptr()
    assert hvd.broadcast_(t, root) is t and t.data_ptr() == ptr
    check(t, data(root, (4,), torch.float64, 45), "broadcast_")
    check(hvd.synchronize(hvd.broadcast_async(data(ME, (2, 2), torch.float32, 46), root)),
          data(root, (2, 2), torch.float32, 46), "broadcast_async")
    t = data(ME, (5,), torch.int32, 47)
    hvd.synchronize(hvd.broadcast_async_(t, root))
    check(t, data(root, (5,), torch.int32, 47), "broadcast_async_")
check(hvd.broadcast(torch.tensor(float(ME)), 0), torch.tensor(0.0), "broadcast 0-d")

# -------------------------------------------------------------------------- alltoall
def splits_of(r: int) -> list[int]:
    return [(r + i) % 3 for i in range(N)]


sends = [data(r, (sum(splits_of(r)), 2), torch.float32, 50) for r in range(N)]


def chunk(r: int, i: int) -> torch.Tensor:
    off = sum(splits_of(r)[:i])
    return sends[r][off: off + splits_of(r)[i]]


want = torch.cat([chunk(r, ME) for r in range(N)])
out, recv = hvd.alltoall(sends[ME], splits=splits_of(ME))
check(out, want, "alltoall with splits")
assert recv.tolist() == [splits_of(r)[ME] for r in range(N)], recv
out, recv = hvd.synchronize(hvd.alltoall_async(sends[ME], splits=torch.tensor(splits_of(ME))))
check(out, want, "alltoall_async")
even = [data(r, (2 * N, 3), torch.bfloat16, 51) for r in range(N)]
out = hvd.alltoall(even[ME])  # without splits: the tensor alone, as Horovod
check(out, torch.cat([even[r][2 * ME: 2 * ME + 2] for r in range(N)]), "alltoall even bf16")
out, recv = hvd.synchronize(hvd.alltoall_async(even[ME]))
assert recv.tolist() == [2] * N

# --------------------------------------------------------------------- reducescatter
def rows_of(total: int) -> tuple[int, int]:
    counts = [total // N + (1 if i < total % N else 0) for i in range(N)]
    return sum(counts[:ME]), counts[ME]


for rows in (2 * N, 2 * N + 1):
    xs = every((rows, 3), torch.float32, 60 + rows)
    off, cnt = rows_of(rows)
    check(hvd.reducescatter(xs[ME], op=hvd.Sum), sum(xs)[off: off + cnt],
          f"reducescatter Sum {rows} rows")
    check(hvd.reducescatter(xs[ME]), (sum(xs) / N)[off: off + cnt], "reducescatter Average")
    check(hvd.synchronize(hvd.reducescatter_async(xs[ME], op=hvd.Sum)), sum(xs)[off: off + cnt],
          "reducescatter_async")
    ys = every((rows, 2), torch.float64, 70 + rows)
    outs = hvd.grouped_reducescatter([xs[ME], ys[ME]], op=hvd.Sum)
    check(outs[0], sum(xs)[off: off + cnt], "grouped_reducescatter 0")
    check(outs[1], sum(ys)[off: off + cnt], "grouped_reducescatter 1")
    outs = hvd.synchronize(hvd.grouped_reducescatter_async([ys[ME]], op=hvd.Sum))
    check(outs[0], sum(ys)[off: off + cnt], "grouped_reducescatter_async")

# ------------------------------------------------------------------------- gradients
def grad_check(name: str, dist_fn, ref_fn, shape_of=lambda r: (3, 2), out_shape_of=None) -> None:
    """dist_fn(x) on this rank vs ref_fn(list of all x) -> list of each rank's output."""
    xs = [data(r, shape_of(r), torch.float64, 80).requires_grad_(True) for r in range(N)]
    ys = ref_fn(xs)
    ws = [data(r, tuple(y.shape), torch.float64, 81) for r, y in enumerate(ys)]
    sum((w * y).sum() for w, y in zip(ws, ys, strict=True)).backward()
    x = data(ME, shape_of(ME), torch.float64, 80).requires_grad_(True)
    y = dist_fn(x)
    check(y.detach(), ys[ME].detach(), f"{name} forward")
    (ws[ME] * y).sum().backward()
    want = xs[ME].grad if xs[ME].grad is not None else torch.zeros_like(xs[ME])  # unused input
    check(x.grad, want, f"{name} gradient", tol=1e-9)


for op in (hvd.Sum, hvd.Average, hvd.Min, hvd.Max, hvd.Product):
    grad_check(f"allreduce {op.name}",
               lambda x, op=op: hvd.allreduce(x, op=op, gradient="exact"),
               lambda xs, op=op: [REDUCE[op](xs)] * N)
grad_check("allreduce scaled", lambda x: hvd.allreduce(x, op=hvd.Sum, prescale_factor=2.0,
                                                        postscale_factor=0.25,
                                                        gradient="exact"),
           lambda xs: [0.5 * sum(xs)] * N)
grad_check("grouped_allreduce", lambda x: hvd.grouped_allreduce([x, 2 * x])[1],
           lambda xs: [2 * sum(xs) / N] * N)
grad_check("allgather", lambda x: hvd.allgather(x, gradient="exact"),
           lambda xs: [torch.cat(xs)] * N,
           shape_of=lambda r: (r + 1, 2))
grad_check("broadcast root", lambda x: hvd.broadcast(x, N - 1, gradient="exact"),
           lambda xs: [xs[N - 1]] * N)
grad_check("alltoall", lambda x: hvd.alltoall(x, splits=splits_of(ME))[0],
           lambda xs: [torch.cat([xs[r][sum(splits_of(r)[:i]): sum(splits_of(r)[:i + 1])]
                                  for r in range(N)]) for i in range(N)],
           shape_of=lambda r: (sum(splits_of(r)), 2))


def rs_ref(xs: list[torch.Tensor]) -> list[torch.Tensor]:
    total = sum(xs) / N
    counts = [5 // N + (1 if i < 5 % N else 0) for i in range(N)]
    return [total[sum(counts[:i]): sum(counts[: i + 1])] for i in range(N)]


grad_check("reducescatter", lambda x: hvd.reducescatter(x, gradient="exact"), rs_ref,
           shape_of=lambda r: (5, 2))

# --------------------------------------------------------------------- SyncBatchNorm
for dims in ((4,), (4, 3, 3)):
    counts = [2 + r for r in range(N)]
    xs = [data(r, (counts[r], *dims), torch.float64, 90) for r in range(N)]
    full = torch.cat(xs).requires_grad_(True)
    ref = torch.nn.BatchNorm1d(4) if len(dims) == 1 else torch.nn.BatchNorm2d(4)
    ref = ref.double()
    sync = hvd.SyncBatchNorm(4).double()
    with torch.no_grad():
        for m in (ref, sync):
            m.weight.copy_(torch.linspace(0.5, 2.0, 4))
            m.bias.copy_(torch.linspace(-1.0, 1.0, 4))
    w_full = data(0, tuple(full.shape), torch.float64, 91)
    y_ref = ref(full)
    (w_full * y_ref).sum().backward()
    off = sum(counts[:ME])
    x = xs[ME].clone().requires_grad_(True)
    y = sync(x)
    check(y.detach(), y_ref[off: off + counts[ME]].detach(), f"SyncBatchNorm{dims} forward")
    (w_full[off: off + counts[ME]] * y).sum().backward()
    check(x.grad, full.grad[off: off + counts[ME]], f"SyncBatchNorm{dims} input grad", 1e-9)
    check(hvd.allreduce(sync.weight.grad, op=hvd.Sum), ref.weight.grad, "SyncBN weight grad")
    check(hvd.allreduce(sync.bias.grad, op=hvd.Sum), ref.bias.grad, "SyncBN bias grad")
    check(sync.running_mean, ref.running_mean, "SyncBN running_mean")
    check(sync.running_var, ref.running_var, "SyncBN running_var")
    sync.eval()
    ref.eval()
    check(sync(xs[ME]), ref(xs[ME]), "SyncBN eval")

# ----------------------------------------------------------------------- sparse / misc
idx = torch.tensor([[ME % 3, 2], [1, ME % 2]])
vals = torch.tensor([float(ME + 1), 10.0])
sp = torch.sparse_coo_tensor(idx, vals, (3, 3), check_invariants=True)
dense_ref = sum(torch.sparse_coo_tensor(torch.tensor([[r % 3, 2], [1, r % 2]]),
                                        torch.tensor([float(r + 1), 10.0]), (3, 3),
                                        check_invariants=True).to_dense()
                for r in range(N))
res = hvd.synchronize(hvd.sparse_allreduce_async(sp, name="sparse", op=hvd.Average))
assert res.is_sparse
check(res.to_dense(), dense_ref / N, "sparse_allreduce_async Average")
assert hvd.broadcast_object({"from": ME, "t": torch.ones(2) * ME}, root_rank=N - 1)["from"] == N - 1
assert hvd.allgather_object(("r", ME)) == [("r", r) for r in range(N)]
hvd.barrier()
assert isinstance(hvd.gpu_operations(), str)
print(f"torch-collectives rank={ME} size={N} checks={CHECKS} OK", flush=True)
hvd.shutdown()
sys.exit(0)
