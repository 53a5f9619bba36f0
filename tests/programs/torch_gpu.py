"""Device-tensor collectives (NCCL path or host staging) against CPU references."""

from __future__ import annotations

import sys

import torch

import hvdcore.torch as hvd

hvd.init()
ME, N = hvd.rank(), hvd.size()
torch.cuda.set_device(hvd.local_rank() % torch.cuda.device_count())
dev = torch.device("cuda", torch.cuda.current_device())
expect = sys.argv[1] if len(sys.argv) > 1 else None
path = hvd.gpu_operations()
assert expect is None or path.startswith(expect), f"device path {path!r}, expected {expect}"


def data(r: int, shape: tuple[int, ...]) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(r), dtype=torch.float64)


def same(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    assert got.device.type == "cuda", f"{what}: result on {got.device}"
    assert torch.allclose(got.cpu(), want, atol=1e-9), f"{what}: {got} vs {want}"


xs = [data(r, (4, 3)) for r in range(N)]
x = xs[ME].to(dev)
same(hvd.allreduce(x, op=hvd.Sum), sum(xs), "allreduce")
same(hvd.allreduce(x), sum(xs) / N, "allreduce average")
t = x.clone()
hvd.allreduce_(t, op=hvd.Max)
same(t, torch.stack(xs).amax(0), "allreduce_ max")
same(hvd.broadcast(x, 0), xs[0], "broadcast")
parts = [data(r, (r + 1, 2)) for r in range(N)]
same(hvd.allgather(parts[ME].to(dev)), torch.cat(parts), "allgather ragged")
out, recv = hvd.alltoall(data(ME, (N, 2)).to(dev))
same(out, torch.cat([data(r, (N, 2))[ME:ME + 1] for r in range(N)]), "alltoall")
same(hvd.reducescatter(data(ME, (N, 2)).to(dev), op=hvd.Sum),
     sum(data(r, (N, 2)) for r in range(N))[ME:ME + 1], "reducescatter")
model = torch.nn.Linear(3, 2).to(dev)
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                               named_parameters=model.named_parameters())
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
model(x.float()).sum().backward()
opt.step()
flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
every = hvd.allgather(flat.reshape(1, -1))
assert torch.equal(every, every[:1].expand_as(every))
print(f"torch-gpu rank={ME} size={N} path={path} OK", flush=True)
hvd.shutdown()
