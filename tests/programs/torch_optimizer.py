"""DistributedOptimizer and broadcast_* against one-process training on the concatenated batch.

For every configuration, each rank trains K steps on its shard with DistributedOptimizer, and
also trains a reference copy in this process on the whole global batch with the plain
optimizer. Parameters must match the reference (float tolerance; looser with fp16
compression) and be bit-identical on every rank after every step, as must optimizer state.
"""

from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F

import hvdcore.torch as hvd
from hvdcore.errors import HvdcoreError

hvd.init()
ME, N = hvd.rank(), hvd.size()
B, K = 4, 5
torch.manual_seed(0)
CHECKS = 0


class Net(torch.nn.Module):
    """Small MLP; ``extra`` is used only by the rank(s) in ``extra_on``."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(6, 8)
        self.fc2 = torch.nn.Linear(8, 3)
        self.extra = torch.nn.Linear(6, 3)

    def forward(self, x: torch.Tensor, use_extra: bool = False) -> torch.Tensor:
        out = self.fc2(torch.tanh(self.fc1(x)))
        return out + self.extra(x) if use_extra else out


def batch(step: int, rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(step)
    return torch.randn(rows, 6, generator=g), torch.randint(0, 3, (rows,), generator=g)


def make_opt(kind: str, params, lr_scale: float = 1.0) -> torch.optim.Optimizer:
    if kind == "sgd":
        return torch.optim.SGD(params, lr=0.1 * lr_scale, momentum=0.9, weight_decay=1e-3)
    return torch.optim.Adam(params, lr=0.01 * lr_scale)


def flat(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def same_on_all_ranks(t: torch.Tensor, what: str) -> None:
    global CHECKS
    every = hvd.allgather(t.detach().reshape(1, -1))
    assert torch.equal(every, every[:1].expand_as(every)), (
        f"rank {ME}: {what} differs between ranks: max diff "
        f"{(every - every[:1]).abs().max().item()}")
    CHECKS += 1


def close(a: torch.Tensor, b: torch.Tensor, tol: float, what: str) -> None:
    global CHECKS
    diff = (a - b).abs().max().item()
    assert diff <= tol * (1 + b.abs().max().item()), f"rank {ME}: {what}: max diff {diff}"
    CHECKS += 1


def state_tensors(opt: torch.optim.Optimizer) -> torch.Tensor:
    sd = opt.state_dict()["state"]
    parts = [torch.as_tensor(v, dtype=torch.float64).reshape(-1)
             for k in sorted(sd) for _, v in sorted(sd[k].items())]
    return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.float64)


def train(kind: str, bpps: int = 1, compression=hvd.Compression.none, op=hvd.Average,
          groups=None, predivide: float = 1.0, extra_on: tuple[int, ...] = (),
          clip: float | None = None, sparse: bool | None = None, rotate: bool = False) -> None:
    """``rotate``: step s uses ``extra`` on rank s % N only (the order in which gradients
    become ready changes from step to step, not their number)."""
    label = (f"{kind} bpps={bpps} {compression.__name__} op={op.name} groups={groups} "
             f"predivide={predivide} extra_on={extra_on} clip={clip} rotate={rotate}")
    torch.manual_seed(1)
    ref = Net().double()
    dist = Net().double()
    dist.load_state_dict(ref.state_dict())
    ref_opt = make_opt(kind, ref.parameters())
    group_arg = groups
    if groups == "explicit":
        group_arg = [[dist.fc1.weight, dist.fc1.bias], [dist.fc2.weight]]
    opt = hvd.DistributedOptimizer(make_opt(kind, dist.parameters()),
                                   named_parameters=dist.named_parameters(),
                                   compression=compression, backward_passes_per_step=bpps,
                                   op=op, groups=group_arg, gradient_predivide_factor=predivide)
    hvd.broadcast_parameters(dist.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    loss_scale = float(N) if op == hvd.Sum else 1.0  # Sum of per-rank means = N x global mean
    tol = 2e-2 if compression is hvd.Compression.fp16 and N > 1 else 1e-9  # (1 rank: no fp16)
    for step in range(K):
        if rotate:
            extra_on = (step % N,)
        x, y = batch(step, B * N * bpps)
        x = x.double()
        # reference: one process, whole global batch; rank r's rows use `extra` if r in extra_on
        ref_opt.zero_grad()
        losses = []
        for r in range(N):
            for m in range(bpps):
                sl = slice((m * N + r) * B, (m * N + r + 1) * B)
                losses.append(F.cross_entropy(ref(x[sl], r in extra_on), y[sl]))
        (loss_scale * torch.stack(losses).mean()).backward()
        for p in ref.parameters():  # Horovod semantics: no gradient anywhere = zero gradient
            if p.grad is None and N > 1:  # (at one rank it is the plain optimizer: none)
                p.grad = torch.zeros_like(p)
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(ref.parameters(), clip)
        ref_opt.step()
        # distributed: this rank's micro-batches, losses scaled by 1/bpps (local accumulation)
        opt.zero_grad()
        for m in range(bpps):
            sl = slice((m * N + ME) * B, (m * N + ME + 1) * B)
            (F.cross_entropy(dist(x[sl], ME in extra_on), y[sl]) / bpps).backward()
        if clip is not None:
            opt.synchronize()
            torch.nn.utils.clip_grad_norm_(dist.parameters(), clip)
            with opt.skip_synchronize():
                opt.step()
        else:
            opt.step()
        same_on_all_ranks(flat(dist), f"{label}: parameters after step {step}")
        same_on_all_ranks(state_tensors(opt), f"{label}: optimizer state after step {step}")
        close(flat(dist), flat(ref), tol, f"{label}: parameters vs reference, step {step}")


for kind in ("sgd", "adam"):
    for bpps in (1, 2):
        for comp in (hvd.Compression.none, hvd.Compression.fp16):
            train(kind, bpps, comp)
train("sgd", op=hvd.Sum)
train("sgd", predivide=2.0)
train("adam", groups=2)
train("sgd", groups="explicit", bpps=2)
train("sgd", extra_on=(0,))            # parameter used on rank 0 only: zero grads elsewhere
train("sgd", extra_on=())              # parameter unused everywhere
train("sgd", rotate=True)              # used on one rank, another each step
train("adam", clip=0.05)               # synchronize() + clip + skip_synchronize()


# ---------------------------------------------------------- sparse gradients (Embedding)
def sparse_run(sparse_as_dense: bool) -> None:
    torch.manual_seed(2)
    ref = torch.nn.Embedding(10, 3, sparse=True).double()
    emb = torch.nn.Embedding(10, 3, sparse=True).double()
    emb.load_state_dict(ref.state_dict())
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.5)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(emb.parameters(), lr=0.5),
                                   named_parameters=emb.named_parameters(),
                                   sparse_as_dense=sparse_as_dense)
    for step in range(3):
        g = torch.Generator().manual_seed(100 + step)
        idx = torch.randint(0, 10, (N, 5), generator=g)
        ref_opt.zero_grad()
        torch.stack([ref(idx[r]).pow(2).sum() for r in range(N)]).mean().backward()
        ref_opt.step()
        opt.zero_grad()
        emb(idx[ME]).pow(2).sum().backward()
        opt.step()
        same_on_all_ranks(emb.weight, f"sparse_as_dense={sparse_as_dense} step {step}")
        close(emb.weight.detach(), ref.weight.detach(), 1e-9, f"sparse_as_dense={sparse_as_dense}")


sparse_run(False)
sparse_run(True)

# ------------------------- gradients of several layouts and dtypes, and a late param group
class Mixed(torch.nn.Module):
    """A channels_last conv (its gradient is not C-contiguous: staged), a float64 linear layer
    and a float32 vector (reduced in their own memory), in one step."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(2, 3, 3)
        self.fc = torch.nn.Linear(12, 3).double()
        self.scale = torch.nn.Parameter(torch.linspace(0.5, 1.5, 3))
        self.conv.to(memory_format=torch.channels_last)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.conv(x)).reshape(x.shape[0], -1)
        return self.fc(h.double()) * self.scale.double()


def mixed_run(create_graph: bool) -> None:
    """Against one process on the whole batch; ``create_graph``: the gradients require grad.
    After step 2 both optimizers get a new parameter group (its allreduce is named then)."""
    label = f"mixed layouts create_graph={create_graph}"
    torch.manual_seed(3)
    ref, dist = Mixed(), Mixed()
    dist.load_state_dict(ref.state_dict())
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(dist.parameters(), lr=0.1),
                                   named_parameters=dist.named_parameters())
    shift_ref = torch.nn.Parameter(torch.zeros(3, dtype=torch.float64))
    shift = torch.nn.Parameter(torch.zeros(3, dtype=torch.float64))
    for step in range(5):
        if step == 2:
            ref_opt.add_param_group({"params": [shift_ref]})
            opt.add_param_group({"params": [shift]})
        g = torch.Generator().manual_seed(300 + step)
        x = torch.randn(B * N, 2, 4, 4, generator=g).to(memory_format=torch.channels_last)
        y = torch.randint(0, 3, (B * N,), generator=g)
        ref_opt.zero_grad()
        out = ref(x) + (shift_ref if step >= 2 else 0)
        torch.stack([F.cross_entropy(out[r * B:(r + 1) * B], y[r * B:(r + 1) * B])
                     for r in range(N)]).mean().backward()
        ref_opt.step()
        opt.zero_grad()
        sl = slice(ME * B, (ME + 1) * B)
        loss = F.cross_entropy(dist(x[sl]) + (shift if step >= 2 else 0), y[sl])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # create_graph's reference-cycle warning
            loss.backward(create_graph=create_graph)
        grad = dist.conv.weight.grad
        assert grad is not None and not grad.is_contiguous(), f"{label}: conv grad contiguous"
        assert dist.fc.weight.grad.requires_grad == create_graph, label
        opt.step()
        for name, a, b in (("conv", dist.conv.weight, ref.conv.weight),
                           ("fc", dist.fc.weight, ref.fc.weight),
                           ("scale", dist.scale, ref.scale), ("shift", shift, shift_ref)):
            same_on_all_ranks(a.detach().double(), f"{label}: {name} after step {step}")
            close(a.detach().double(), b.detach().double(), 1e-5,
                  f"{label}: {name} vs reference, step {step}")
        dist.zero_grad(set_to_none=True)  # create_graph's gradients hold the graph


mixed_run(False)
mixed_run(True)

# ----------------------------------------------- broadcast_parameters / optimizer state
torch.manual_seed(100 + ME)                      # every rank starts from different weights
model = Net()
params0 = hvd.broadcast(flat(model), 0)
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
same_on_all_ranks(flat(model), "broadcast_parameters(state_dict)")
close(flat(model), params0, 0.0, "broadcast_parameters = rank 0's weights")
torch.manual_seed(200 + ME)
model2 = Net()
hvd.broadcast_parameters(model2.named_parameters(), root_rank=N - 1)
same_on_all_ranks(flat(model2), "broadcast_parameters(named_parameters)")

# lazy state: fresh Adam everywhere -> still empty; then rank 0 alone has state and a
# different lr (a resumed checkpoint): every rank must end with rank 0's state and lr.
adam = torch.optim.Adam(model.parameters(), lr=0.001 if ME == 0 else 0.5)
hvd.broadcast_optimizer_state(adam, root_rank=0)
assert len(adam.state) == 0 and adam.param_groups[0]["lr"] == 0.001
if ME == 0:
    for _ in range(2):
        adam.zero_grad()
        model(torch.randn(4, 6)).pow(2).sum().backward()
        adam.step()
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
dopt = hvd.DistributedOptimizer(adam, named_parameters=model.named_parameters())
hvd.broadcast_optimizer_state(dopt, root_rank=0)
assert len(adam.state) == 4, len(adam.state)  # fc1/fc2 weight+bias; `extra` got no gradient
same_on_all_ranks(state_tensors(adam), "broadcast_optimizer_state (rank 0 only had state)")
assert all(float(s["step"]) == 2.0 for s in adam.state.values())
# and training continues identically everywhere
x, y = batch(7, B)
dopt.zero_grad()
F.cross_entropy(model(x), y).backward()
dopt.step()
same_on_all_ranks(flat(model), "parameters after a step from the broadcast state")

# a learning-rate scheduler on the wrapper (each DistributedOptimizer gets its own model: the
# gradient hooks of a wrapper stay on its parameters)
model = Net()
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
sched_opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=1.0))
sched = torch.optim.lr_scheduler.StepLR(sched_opt, step_size=1, gamma=0.5)
for _ in range(2):
    sched_opt.zero_grad()
    F.cross_entropy(model(x), y).backward()
    sched_opt.step()
    sched.step()
assert abs(sched_opt.param_groups[0]["lr"] - 0.25) < 1e-12
CHECKS += 1

# ------------------------------------------------------------------ usage errors
model = Net()
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                               named_parameters=model.named_parameters())
F.cross_entropy(model(x), y).backward()
if N > 1:  # (at one rank nothing is in flight and passes are not counted, as in Horovod)
    try:
        opt.zero_grad()
        raise AssertionError("zero_grad() with allreduces in flight must fail")
    except hvd.HorovodInternalError as e:
        assert "before optimizer.step()" in str(e)
opt.step()
F.cross_entropy(model(x), y).backward()
if N > 1:
    try:
        F.cross_entropy(model(x), y).backward()
        raise AssertionError("a second backward with backward_passes_per_step=1 must fail")
    except HvdcoreError as e:
        assert "backward_passes_per_step=1" in str(e), e
opt.synchronize()
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    opt.step()
assert any("skip_synchronize" in str(w.message) for w in caught)
for bad in (dict(named_parameters=[("a", model.fc1.weight)]),
            dict(named_parameters=[("a", p) for p in model.parameters()]),
            dict(op=hvd.Sum, gradient_predivide_factor=2.0)):
    try:
        hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), **bad)
        raise AssertionError(f"{bad} must be rejected")
    except ValueError:
        CHECKS += 1
print(f"torch-optimizer rank={ME} size={N} checks={CHECKS} OK", flush=True)
hvd.shutdown()
