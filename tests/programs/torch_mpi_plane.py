"""The CUDA-aware MPI data plane's code on CPU tensors (no GPU here): the backend is registered
with the engine by hand (its selection needs a GPU and a CUDA-aware MPI; that logic is tested
by test_torch_dataplanes.py) and the core's collectives run on torch tensors through it,
against references computed in this process."""

import numpy as np
import torch

import hvdcore as core
import hvdcore.torch as hvd
from hvdcore import basics
from hvdcore.torch import dataplanes
from hvdcore.torch.backends import CudaAwareMPIBackend

hvd.init()
R, N = hvd.rank(), hvd.size()
plane = CudaAwareMPIBackend("mpi", torch.device("cpu"))
basics.state().engine.register_backend(plane.key, plane)
checks = 0


def check(cond: bool, what: str) -> None:
    global checks
    if not cond:
        raise AssertionError(f"rank {R}: {what}")
    checks += 1


def buf(t: torch.Tensor):  # type: ignore[no-untyped-def]
    return dataplanes.wrap(plane, t.contiguous())


# allreduce: float16 goes through a float32 buffer (MPI has no half); fused group; in place
for dtype in (torch.float32, torch.float16, torch.int32, torch.bool):
    x = (torch.arange(6) + R).to(dtype)
    got = core.allreduce(buf(x), op=core.Sum if dtype != torch.bool else core.Max)
    want = sum((torch.arange(6) + r).to(torch.float64) for r in range(N))
    if dtype == torch.bool:
        want = torch.stack([(torch.arange(6) + r).to(torch.bool) for r in range(N)]).any(0)
    check(torch.equal(got, want.to(dtype)), f"allreduce {dtype}: {got}")
parts = [torch.full((5 + i,), float(R)) for i in range(4)]
before = plane.calls["allreduce"]
outs = core.grouped_allreduce([buf(p) for p in parts], op=core.Average)
check(plane.calls["allreduce"] - before == 1, "group not fused")
check(all(torch.allclose(o, torch.full_like(o, (N - 1) / 2)) for o in outs), f"{outs}")
y = torch.ones(3) * (R + 1)
b = buf(y)
core.allreduce(b, op=core.Sum, out=b)
check(torch.equal(y, torch.full((3,), N * (N + 1) / 2)), f"in place {y}")
# allgather (uneven), broadcast, alltoall (splits), reducescatter (uneven)
g = core.allgather(buf(torch.full((R + 1, 2), R, dtype=torch.int64)))
check(torch.equal(g, torch.cat([torch.full((r + 1, 2), r) for r in range(N)])), f"{g}")
bc = core.broadcast(buf(torch.arange(4.0) + R), N - 1)
check(torch.equal(bc, torch.arange(4.0) + N - 1), f"{bc}")
splits = [r + 1 for r in range(N)]
out, recv = core.alltoall(buf(torch.full((sum(splits),), float(R))), splits=splits)
check(torch.equal(out, torch.cat([torch.full((R + 1,), float(r)) for r in range(N)])), f"{out}")
check(list(recv) == [R + 1] * N, f"{recv}")
rows = 2 * N + 1
rs = core.reducescatter(buf(torch.arange(rows * 2, dtype=torch.float64).reshape(rows, 2)),
                        op=core.Sum)
counts = [rows // N + (1 if i < rows % N else 0) for i in range(N)]
start = sum(counts[:R])
ref = (torch.arange(rows * 2, dtype=torch.float64).reshape(rows, 2) * N)[start:start + counts[R]]
check(torch.equal(rs, ref), f"reducescatter {rs} vs {ref}")
check(isinstance(got, torch.Tensor) and not isinstance(got, np.ndarray), "result type")
print(f"torch-mpi-plane rank={R} size={N} checks={checks} OK", flush=True)
hvd.shutdown()
