"""Where Horovod 0.28.1's rules for the optimizer and process sets decide, at 1, 2 and 3 ranks.

The anchors (horovod/torch/optimizer.py, horovod/common/process_sets.py, basics.py):

- ``_DistributedOptimizer.__init__`` registers its hooks only ``if
  self.process_set.included() and (size() > 1 or HOROVOD_ELASTIC)``: at one rank it is the
  wrapped optimizer (no compression, no scaling, extra backward passes and an early
  ``zero_grad()`` allowed, unused parameters keep no gradient), and on a rank outside its
  process set ``synchronize()`` returns at once and ``step()`` is local;
- ``step(closure)`` hands the closure to the wrapped optimizer (LBFGS at one rank);
- ``groups=[...]`` keeps of each group the trainable parameters; a non-tensor or a parameter
  in two groups is a ValueError;
- ``add_process_set`` of ranks that already form a set: ValueError ("duplicate");
- ``broadcast_object`` / ``allgather_object`` serialize with cloudpickle (lambdas too);
- ``is_homogeneous()`` (horovod/torch/mpi_ops.py: ``_basics.is_homogeneous``): a bool, True
  when every node runs as many ranks (one host here).

Each rule is checked against the plain torch optimizer run in this process on the same data
(bit for bit where no reduction happens), on every rank. Prints ``torch-horovod-rules ... OK``.
"""

from __future__ import annotations

import importlib.util

import torch

import hvdcore.torch as hvd
from hvdcore.errors import UnsupportedError

hvd.init()
ME, N = hvd.rank(), hvd.size()
CHECKS = 0
CLOUDPICKLE = importlib.util.find_spec("cloudpickle") is not None


def ok(cond: bool, what: str) -> None:
    global CHECKS
    assert cond, f"rank {ME} of {N}: {what}"
    CHECKS += 1


def data(rank: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(6, 4, generator=g, dtype=torch.float64), \
        torch.randn(6, 1, generator=g, dtype=torch.float64)


def model(seed: int = 5) -> torch.nn.Module:
    torch.manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 1))
    return net.double()


def loss_of(net: torch.nn.Module, rank: int, step: int) -> torch.Tensor:
    x, y = data(rank, step)
    return ((net(x) - y) ** 2).mean()


def flat(net: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in net.parameters()])


def train_against(ref: torch.optim.Optimizer, plain: torch.nn.Module, opt: torch.optim.Optimizer,
                  dist: torch.nn.Module, ranks: list[int], what: str) -> None:
    """Two steps of ``opt`` on this rank's data against ``ref`` on the mean of ``ranks``'
    losses, in this process."""
    for step in range(2):
        ref.zero_grad()
        torch.stack([loss_of(plain, r, step) for r in ranks]).mean().backward()
        ref.step()
        opt.zero_grad()
        loss_of(dist, ME, step).backward()
        opt.step()
        ok(torch.allclose(flat(dist), flat(plain), rtol=1e-12, atol=1e-12),
           f"{what}: step {step} == one process")


# -------------------------------------------------- one rank: the wrapped optimizer itself
if N == 1:
    plain, dist = model(), model()
    unused = torch.nn.Parameter(torch.ones(2, dtype=torch.float64))
    unused_ref = torch.nn.Parameter(torch.ones(2, dtype=torch.float64))
    ref = torch.optim.SGD([*plain.parameters(), unused_ref], lr=0.1, momentum=0.9,
                          weight_decay=0.01)
    opt = hvd.DistributedOptimizer(
        torch.optim.SGD([*dist.parameters(), unused], lr=0.1, momentum=0.9, weight_decay=0.01),
        compression=hvd.Compression.fp16, gradient_predivide_factor=2.0)
    for step in range(3):
        for o, net in ((ref, plain), (opt, dist)):
            loss_of(net, 0, step).backward()
            o.zero_grad()  # between backward and step: allowed where nothing is in flight
            loss_of(net, 0, step).backward()
            loss_of(net, 1, step).backward()  # a second pass, backward_passes_per_step=1
            o.step()
        ok(torch.equal(flat(dist), flat(plain)), f"one rank: step {step} == plain SGD bits")
    ok(unused.grad is None and torch.equal(unused.detach(), torch.ones(2, dtype=torch.float64)),
       "one rank: an unused parameter keeps no gradient and does not move")
    plain, dist = model(), model()
    lbfgs = torch.optim.LBFGS(plain.parameters(), max_iter=5)
    dopt = hvd.DistributedOptimizer(torch.optim.LBFGS(dist.parameters(), max_iter=5))
    for o, net in ((lbfgs, plain), (dopt, dist)):
        def closure(o=o, net=net) -> torch.Tensor:
            o.zero_grad()
            loss = loss_of(net, 0, 0)
            loss.backward()
            return loss
        o.step(closure)
    ok(torch.equal(flat(dist), flat(plain)), "one rank: LBFGS step(closure) == plain LBFGS")

# ------------------------------------------- a closure at any size: evaluated once, averaged
plain, dist = model(), model()
ref = torch.optim.LBFGS(plain.parameters(), max_iter=1)
opt = hvd.DistributedOptimizer(torch.optim.LBFGS(dist.parameters(), max_iter=1),
                               named_parameters=dist.named_parameters())


def global_closure() -> torch.Tensor:  # the reference: the mean of every rank's loss
    ref.zero_grad()
    loss = torch.stack([loss_of(plain, r, 0) for r in range(N)]).mean()
    loss.backward()
    return loss


def my_closure() -> torch.Tensor:
    opt.zero_grad()
    loss = loss_of(dist, ME, 0)
    loss.backward()
    return loss


ref.step(global_closure)
got = opt.step(my_closure)
ok(torch.allclose(flat(dist), flat(plain), rtol=1e-12, atol=1e-12),
   "LBFGS(max_iter=1) step(closure) == one process on every rank's loss")
ok(torch.equal(got.detach(), loss_of(model(), ME, 0).detach()),
   "step(closure) returns this rank's loss of the closure")
if N > 1:
    dist = model()  # (the first wrapper's hooks stay on the parameters it wrapped)
    opt = hvd.DistributedOptimizer(torch.optim.LBFGS(dist.parameters(), max_iter=3),
                                   named_parameters=dist.named_parameters())
    try:
        opt.step(my_closure)
        raise AssertionError("a second closure evaluation at several ranks must fail")
    except UnsupportedError as e:
        ok("evaluated the closure again" in str(e), str(e))
    ok(hvd.allreduce(torch.ones(1), op=hvd.Sum).item() == N, "the job works after it")

# -------------------------------------- groups: the trainable parameters of each group
plain, dist = model(), model()
for net in (plain, dist):
    net[0].bias.requires_grad_(False)
ref = torch.optim.SGD(plain.parameters(), lr=0.2)
opt = hvd.DistributedOptimizer(torch.optim.SGD(dist.parameters(), lr=0.2),
                               named_parameters=dist.named_parameters(),
                               groups=[list(dist.parameters())])
train_against(ref, plain, opt, dist, list(range(N)), "groups with a frozen parameter")
for bad in ([[dist[0].weight, dist[0].weight]], [[dist[0].weight], [dist[0].weight]],
            [["weight"]], -1, 0):  # (Horovod: groups > 0 or a list)
    try:
        hvd.DistributedOptimizer(torch.optim.SGD(dist.parameters(), lr=0.2), groups=bad)
        raise AssertionError(f"groups={bad!r} must be rejected")
    except ValueError:
        ok(True, "")

# ------------------------------------------- process sets: duplicates; a rank outside one
if N > 1:
    try:
        hvd.add_process_set(list(range(N)))
        raise AssertionError("a set of every rank duplicates the global set")
    except ValueError as e:
        ok("duplicate" in str(e), str(e))
    members = hvd.add_process_set(list(range(N - 1)))
    plain, dist = model(), model()
    ref = torch.optim.SGD(plain.parameters(), lr=0.3, momentum=0.5)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(dist.parameters(), lr=0.3, momentum=0.5),
                                   named_parameters=dist.named_parameters(),
                                   process_set=members)
    mine = list(range(N - 1)) if ME < N - 1 else [ME]  # whose losses this rank's step averages
    train_against(ref, plain, opt, dist, mine,
                  f"process set {members.ranks} (a member averages, the others not)")
    hvd.remove_process_set(members)

# -------------------------------------------- objects: cloudpickle's reach, or a clear error
for call in ("broadcast_object", "allgather_object"):
    offset = 7
    fn = (lambda: offset + 1) if ME == 0 else None
    try:
        if call == "broadcast_object":
            got = hvd.broadcast_object(fn, root_rank=0)()
        else:
            got = hvd.allgather_object(fn)[0]()
        ok(CLOUDPICKLE and got == 8, f"{call} of a lambda: {got}")
    except ValueError as e:
        ok(not CLOUDPICKLE and "cloudpickle" in str(e), f"{call}: {e}")
    ok(hvd.broadcast_object({"after": call}, root_rank=0) == {"after": call},
       f"{call}: the next call works")

ok(hvd.is_homogeneous() is True, f"is_homogeneous(): {hvd.is_homogeneous()!r}")

print(f"torch-horovod-rules rank={ME} size={N} cloudpickle={CLOUDPICKLE} checks={CHECKS} OK",
      flush=True)
