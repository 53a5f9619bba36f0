"""``op=hvd.Adasum`` in the torch binding (CPU tensors), on 1, 2, 4, ... ranks.

Each result against ``adasum.tree_reduce`` (Horovod's tree and arithmetic in one process), bit
for bit: ``allreduce``, ``allreduce_``, ``allreduce_async``, ``grouped_allreduce``; the gradient
of an Adasum allreduce is the Adasum of the output gradients (Horovod's ``HorovodAllreduce``
backward). ``DistributedOptimizer(op=Adasum)``: Horovod's delta optimizer (each rank steps on its
own gradients, the parameter changes are combined with Adasum) against that computed in one
process with one model and optimizer per rank, bit for bit, SGD with momentum and Adam, over
three steps, with two backward passes per step and with fp16 compression; at one rank it is
the plain optimizer (Horovod's rule), which the same reference then is. On 3 ranks both are
refused on every rank (NotImplementedError, as Horovod's). Prints
``TORCH ADASUM OK <checks>``.
"""

from __future__ import annotations

import numpy as np
import torch
from rank_checks import Checks

import hvdcore.torch as hvd
from hvdcore.engine.adasum import tree_reduce

hvd.init()
R, N = hvd.rank(), hvd.size()
CHECKS = Checks(R)
ok = CHECKS.ok


if N & (N - 1):  # Horovod's limit, both for the collective and for its optimizer
    for make in (lambda: hvd.allreduce(torch.ones(3), op=hvd.Adasum),
                 lambda: hvd.DistributedOptimizer(torch.optim.SGD(torch.nn.Linear(2, 1)
                                                                  .parameters(), lr=0.1),
                                                  op=hvd.Adasum)):
        try:
            make()
        except NotImplementedError as err:
            ok("power-of-two" in str(err), str(err))
        else:
            raise AssertionError(f"rank {R}: Adasum on {N} ranks was accepted")
    ok(torch.equal(hvd.allreduce(torch.ones(2), op=hvd.Sum), torch.full((2,), float(N))),
       "Sum after the refusals")
    print(f"TORCH ADASUM OK {CHECKS.count}", flush=True)
    raise SystemExit(0)


def data(rank: int, n: int, dtype: torch.dtype, salt: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(100 * rank + salt)
    return (torch.randn(n, generator=gen, dtype=torch.float64) * (rank + 1) + salt).to(dtype)


def want(n: int, dtype: torch.dtype, salt: int) -> np.ndarray:
    return tree_reduce([data(r, n, dtype, salt).numpy() for r in range(N)])


def same(got: torch.Tensor, ref: np.ndarray, what: str) -> None:
    ok(got.dtype == torch.from_numpy(ref).dtype and np.array_equal(got.numpy(), ref),
       f"{what}: {got} != {ref}")


for dtype in (torch.float16, torch.float32, torch.float64):
    same(hvd.allreduce(data(R, 9, dtype, 1), op=hvd.Adasum), want(9, dtype, 1), f"{dtype}")
    t = data(R, 5, dtype, 2)
    hvd.allreduce_(t, op=hvd.Adasum, name=f"inplace.{dtype}")
    same(t, want(5, dtype, 2), f"allreduce_ {dtype}")
    h = hvd.allreduce_async(data(R, 7, dtype, 3), op=hvd.Adasum)
    same(hvd.synchronize(h), want(7, dtype, 3), f"async {dtype}")
    got = hvd.grouped_allreduce([data(R, 4, dtype, 4), data(R, 6, dtype, 5)], op=hvd.Adasum)
    same(got[0], want(4, dtype, 4), f"grouped {dtype} #0")
    same(got[1], want(6, dtype, 5), f"grouped {dtype} #1")

x = data(R, 6, torch.float64, 6).requires_grad_()
y = hvd.allreduce(x, op=hvd.Adasum, name="adasum.grad")
weights = data(R, 6, torch.float64, 7)  # each rank's output gradient
(y * weights).sum().backward()
same(x.grad, want(6, torch.float64, 7), "gradient")



# -- DistributedOptimizer(op=Adasum): Horovod's delta optimizer --------------------------------
class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(4, 3), torch.nn.Linear(3, 1)
        self.unused = torch.nn.Parameter(torch.ones(2))  # no gradient: its change is zero

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.tanh(self.fc1(x)))


def batch(rank: int, step: int, npass: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1000 * rank + 10 * step + npass)
    return torch.randn(5, 4, generator=gen), torch.randn(5, 1, generator=gen)


def fresh(make_opt) -> tuple[Net, torch.optim.Optimizer]:
    torch.manual_seed(0)
    net = Net()
    return net, make_opt(net.parameters())


def reference(make_opt, steps: int, passes: int, fp16: bool) -> list[torch.Tensor]:
    """Every rank's model and optimizer in this process: each steps on its own gradients, the
    changes go through the one-process Adasum tree, every model gets start + that."""
    copies = [fresh(make_opt) for _ in range(N)]
    for step in range(steps):
        starts = [[p.detach().clone() for p in net.parameters()] for net, _ in copies]
        for r, (net, opt) in enumerate(copies):
            for npass in range(passes):
                x, y = batch(r, step, npass)
                torch.nn.functional.mse_loss(net(x), y).backward()
            opt.step()
            opt.zero_grad()
        if N == 1:  # Horovod's rule: one rank has the plain optimizer (no start + change)
            continue
        for i in range(len(starts[0])):
            deltas = []
            for r, (net, _) in enumerate(copies):
                d = (list(net.parameters())[i].detach() - starts[r][i]).reshape(-1)
                deltas.append((d.half() if fp16 else d).numpy())
            summed = torch.from_numpy(tree_reduce(deltas)).to(starts[0][i].dtype)
            for r, (net, _) in enumerate(copies):
                with torch.no_grad():
                    list(net.parameters())[i].copy_(starts[r][i] + summed.reshape(
                        starts[r][i].shape))
    return [p.detach() for p in copies[0][0].parameters()]


def train(make_opt, steps: int, passes: int, fp16: bool) -> list[torch.Tensor]:
    net, inner = fresh(make_opt)
    opt = hvd.DistributedOptimizer(inner, named_parameters=net.named_parameters(),
                                   op=hvd.Adasum, backward_passes_per_step=passes,
                                   compression=hvd.Compression.fp16 if fp16 else
                                   hvd.Compression.none)
    for step in range(steps):
        for npass in range(passes):
            x, y = batch(R, step, npass)
            torch.nn.functional.mse_loss(net(x), y).backward()
        opt.step()
        opt.zero_grad()
    return [p.detach() for p in net.parameters()]


SETUPS = {"sgd-momentum": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
          "adam": lambda ps: torch.optim.Adam(ps, lr=0.01)}
for label, make_opt in SETUPS.items():
    for passes, fp16 in ((1, False), (2, False), (1, True)):
        got = train(make_opt, 3, passes, fp16)
        ref = reference(make_opt, 3, passes, fp16)
        ok(all(torch.equal(g, w) for g, w in zip(got, ref, strict=True)),
           f"delta optimizer {label} passes={passes} fp16={fp16}: {got} vs {ref}")
        every = hvd.allgather_object([g.tolist() for g in got])
        ok(all(e == every[0] for e in every), f"{label}: ranks' models differ")

print(f"TORCH ADASUM OK {CHECKS.count}", flush=True)
