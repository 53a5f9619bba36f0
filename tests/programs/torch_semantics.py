"""Horovod 0.28.1 semantics of hvdcore.torch, the sections named in ``argv[1:]`` in that order
(``all``: every one), each against a reference computed in this process with plain torch (every
rank can regenerate every rank's input). Sections: grad, alltoall, sparse, bcast_state,
optimizer, parity (issue 52). Each prints one line per rank when it passed; several sections share one launch
because starting 3 torch ranks costs more than most sections do.
"""

from __future__ import annotations

import re
import sys
import warnings

import torch
import torch.nn as nn

import hvdcore.torch as hvd

hvd.init()
ME, N = hvd.rank(), hvd.size()
CHECKS = 0


def data(r: int, shape: tuple[int, ...], salt: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(1000 * salt + r + 7)
    return torch.randn(shape, generator=g, dtype=torch.float64)


def check(got: torch.Tensor, want: torch.Tensor, what: str, tol: float = 1e-9) -> None:
    global CHECKS
    assert got.shape == want.shape, (
        f"rank {ME}: {what}: shape {tuple(got.shape)} != {tuple(want.shape)}")
    assert torch.allclose(got.double(), want.double(), atol=tol, rtol=tol), (
        f"rank {ME}: {what}: got {got} want {want}")
    CHECKS += 1


def expect_value_error(what: str, fn) -> None:
    global CHECKS
    try:
        fn()
    except ValueError as e:
        assert str(e), "empty error message"
        CHECKS += 1
    else:
        raise AssertionError(f"rank {ME}: {what} did not raise ValueError")
    # The runtime stays healthy: the next collective works on every rank.
    check(hvd.allreduce(torch.ones(2), op=hvd.Sum), torch.full((2,), float(N)), f"after {what}")


def grad_of(fn, x: torch.Tensor, w: torch.Tensor | list[torch.Tensor]) -> torch.Tensor:
    x = x.clone().requires_grad_(True)
    y = fn(x)
    ys, ws = (y, w) if isinstance(y, list) else ([y], [w])
    sum((wi * yi).sum() for wi, yi in zip(ws, ys, strict=True)).backward()
    return x.grad


def splits_of(r: int) -> list[int]:
    return [(r + i) % 3 for i in range(N)]


# ----------------------------------------------------------------------------- item 3
def section_grad() -> None:
    """Each rank's loss is (w_r * output).sum(); the gradients are Horovod's definitions."""
    counts = [5 // N + (1 if i < 5 % N else 0) for i in range(N)]
    # allgather: the average over ranks of the output gradient, this rank's rows.
    rows = [r + 1 for r in range(N)]
    ws = [data(r, (sum(rows), 2), 1) for r in range(N)]
    mine = sum(rows[:ME])
    want = (sum(ws) / N)[mine: mine + rows[ME]]
    check(grad_of(hvd.allgather, data(ME, (rows[ME], 2), 2), ws[ME]), want, "allgather grad")
    check(grad_of(lambda x: hvd.allgather(x, gradient="exact"), data(ME, (rows[ME], 2), 2),
                  ws[ME]), want * N, "allgather exact grad")
    ws2 = [data(r, (sum(rows), 3), 3) for r in range(N)]
    g = grad_of(lambda x: hvd.grouped_allgather([x, x.repeat(1, 3)[:, :3] * 2]),
                data(ME, (rows[ME], 1), 4), [ws[ME][:, :1], ws2[ME]])
    want = ((sum(ws)[:, :1] + 2 * sum(ws2).sum(1, keepdim=True)) / N)[mine: mine + rows[ME]]
    check(g, want, "grouped_allgather grad")
    # broadcast: the average over ranks on the root, zero elsewhere.
    for root in sorted({0, N - 1}):
        ws = [data(r, (3, 2), 5 + root) for r in range(N)]
        want = sum(ws) / N if ME == root else torch.zeros(3, 2, dtype=torch.float64)
        check(grad_of(lambda x: hvd.broadcast(x, root), data(ME, (3, 2), 6), ws[ME]), want,
              f"broadcast root {root} grad")
    # reducescatter: allgather of the output gradient, times the size for Sum, times scales.
    ws = [data(r, (counts[r], 2), 7) for r in range(N)]
    x = data(ME, (5, 2), 8)
    check(grad_of(lambda x: hvd.reducescatter(x, op=hvd.Sum), x, ws[ME]), torch.cat(ws) * N,
          "reducescatter Sum grad")
    check(grad_of(hvd.reducescatter, x, ws[ME]), torch.cat(ws), "reducescatter Average grad")
    check(grad_of(lambda x: hvd.reducescatter(x, op=hvd.Average, prescale_factor=2.0,
                                              postscale_factor=0.25), x, ws[ME]),
          torch.cat(ws) * 0.5, "reducescatter scaled grad")
    check(grad_of(lambda x: hvd.reducescatter(x, op=hvd.Sum, gradient="exact"), x, ws[ME]),
          torch.cat(ws), "reducescatter exact grad")
    ws2 = [data(r, (counts[r], 2), 9) for r in range(N)]
    g = grad_of(lambda x: hvd.grouped_reducescatter([x, 3 * x], op=hvd.Sum), x,
                [ws[ME], ws2[ME]])
    check(g, (torch.cat(ws) + 3 * torch.cat(ws2)) * N, "grouped_reducescatter Sum grad")
    # allreduce: the output gradient reduced with the same op and scale factors.
    ws = [data(r, (3,), 10) for r in range(N)]
    stacked = torch.stack(ws)
    for op, ref in ((hvd.Min, stacked.min(0).values), (hvd.Max, stacked.max(0).values),
                    (hvd.Product, stacked.prod(0)), (hvd.Average, stacked.mean(0))):
        check(grad_of(lambda x, op=op: hvd.allreduce(x, op=op), data(ME, (3,), 11), ws[ME]),
              ref, f"allreduce {op.name} grad")
    check(grad_of(lambda x: hvd.allreduce(x, op=hvd.Sum, prescale_factor=2.0,
                                          postscale_factor=0.25), data(ME, (3,), 11), ws[ME]),
          stacked.sum(0) * 0.5, "allreduce scaled grad")
    check(grad_of(lambda x: hvd.grouped_allreduce([x, x * 2], op=hvd.Max)[1],
                  data(ME, (3,), 11), ws[ME]), 2 * stacked.max(0).values,
          "grouped_allreduce Max grad")
    # alltoall (with and without splits): the output gradient sent back.
    sends = [sum(splits_of(r)) for r in range(N)]
    ws = [data(r, (sum(splits_of(s)[r] for s in range(N)), 2), 12) for r in range(N)]

    def back(r: int) -> torch.Tensor:  # rows of rank r's input come back from each receiver
        parts = []
        for i in range(N):
            start = sum(splits_of(s)[i] for s in range(r))
            parts.append(ws[i][start: start + splits_of(r)[i]])
        return torch.cat(parts)
    check(grad_of(lambda x: hvd.alltoall(x, splits=splits_of(ME))[0], data(ME, (sends[ME], 2), 13),
                  ws[ME]), back(ME), "alltoall grad")
    ws = [data(r, (2 * N, 2), 14) for r in range(N)]
    want = torch.cat([ws[i][2 * ME: 2 * ME + 2] for i in range(N)])
    check(grad_of(hvd.alltoall, data(ME, (2 * N, 2), 15), ws[ME]), want, "alltoall even grad")
    expect_value_error("gradient='sum'", lambda: hvd.allgather(torch.ones(1), gradient="sum"))


# ----------------------------------------------------------------------------- item 5
def section_alltoall() -> None:
    global CHECKS
    xs = [data(r, (2 * N, 3), 20) for r in range(N)]
    want = torch.cat([xs[r][2 * ME: 2 * ME + 2] for r in range(N)])
    out = hvd.alltoall(xs[ME])
    assert isinstance(out, torch.Tensor), f"alltoall without splits returned {type(out)}"
    check(out, want, "alltoall without splits")
    ys = [data(r, (sum(splits_of(r)), 2), 21) for r in range(N)]
    res = hvd.alltoall(ys[ME], splits=splits_of(ME))
    assert isinstance(res, tuple) and len(res) == 2, type(res)
    want_y = torch.cat([ys[r][sum(splits_of(r)[:ME]): sum(splits_of(r)[:ME + 1])]
                        for r in range(N)])
    check(res[0], want_y, "alltoall with splits")
    assert res[1].tolist() == [splits_of(r)[ME] for r in range(N)], res[1]
    out, recv = hvd.synchronize(hvd.alltoall_async(xs[ME], name="a2a.nosplits"))
    check(out, want, "alltoall_async without splits")
    assert recv.tolist() == [2] * N, recv
    out, recv = hvd.synchronize(hvd.alltoall_async(ys[ME], torch.tensor(splits_of(ME))))
    check(out, want_y, "alltoall_async with splits")
    CHECKS += 3
    if N > 1:
        expect_value_error("dim 0 not divisible", lambda: hvd.alltoall(torch.ones(2 * N + 1)))
        expect_value_error("async dim 0 not divisible",
                           lambda: hvd.synchronize(hvd.alltoall_async(torch.ones(N + 1, 2))))
    expect_value_error("splits too long", lambda: hvd.alltoall(torch.ones(4), splits=[1] * (N + 1)))
    expect_value_error("negative split",
                       lambda: hvd.alltoall(torch.ones(4), splits=[5] + [-1] + [0] * (N - 2)
                                            if N > 1 else [-1]))
    expect_value_error("splits sum", lambda: hvd.alltoall(torch.ones(4), splits=[1] * N))
    expect_value_error("tensor splits", lambda: hvd.alltoall(torch.ones(4),
                                                             splits=torch.tensor([9] * N)))


# ----------------------------------------------------------------------------- item 6
def section_sparse() -> None:
    def sp(r: int, i: int) -> torch.Tensor:
        d = data(r, (5, 3), 30 + i)
        d[d < 0.3] = 0
        return d.to_sparse()
    handles = [hvd.sparse_allreduce_async(sp(ME, i), name=f"sp.{i}", op=hvd.Average)
               for i in range(3)]
    assert all(callable(h) for h in handles), "sparse_allreduce_async handle is not callable"
    for i, h in enumerate(handles):
        got = h()
        assert got.is_sparse
        check(got.to_dense(), sum(sp(r, i).to_dense() for r in range(N)) / N, f"sparse {i}")
        check(hvd.synchronize(h).to_dense(), got.to_dense(), f"sparse {i} synchronize again")
    h = hvd.sparse_allreduce_async(sp(ME, 5), "sp.sum", hvd.Sum)
    check(h().to_dense(), sum(sp(r, 5).to_dense() for r in range(N)), "sparse Sum")


# ----------------------------------------------------------------------------- item 7
def same_everywhere(t: torch.Tensor, what: str) -> None:
    every = hvd.allgather(t.detach().reshape(1, -1).double())
    check(every, every[:1].expand_as(every), what, tol=0)


def section_bcast_state() -> None:
    global CHECKS
    x = data(ME, (4, 3), 40).float()
    # Options differ per rank, one of them a tensor; DistributedOptimizer; a step makes state.
    for cls, mine, root in (
        (torch.optim.SGD,
         dict(lr=torch.tensor(0.1 * (ME + 1)), momentum=0.5 + 0.1 * ME, dampening=ME,
              nesterov=False, weight_decay=0),
         dict(lr=torch.tensor(0.1), momentum=0.5, dampening=0, nesterov=False, weight_decay=0)),
        (torch.optim.Adam,
         dict(lr=0.01 * (ME + 1), betas=(0.9, 0.99 - 0.01 * ME), amsgrad=ME == 0,
              weight_decay=ME, foreach=False),
         dict(lr=0.01, betas=(0.9, 0.99), amsgrad=True, weight_decay=0, foreach=False)),
    ):
        torch.manual_seed(ME)
        model = nn.Linear(3, 2)
        opt = hvd.DistributedOptimizer(cls(model.parameters(), **mine),
                                       named_parameters=model.named_parameters())
        model(x).sum().backward()
        opt.step()
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        hvd.broadcast_optimizer_state(opt, root_rank=0)
        assert opt.param_groups is opt.wrapped_optimizer.param_groups, "param_groups unshared"
        assert opt.state is opt.wrapped_optimizer.state, "state unshared"
        for k, v in root.items():
            got = opt.param_groups[0][k]
            assert type(got) is type(v), f"rank {ME}: {cls.__name__} {k}: {type(got)} != {type(v)}"
            if isinstance(v, torch.Tensor):
                check(got, v, f"{cls.__name__} {k}", tol=1e-7)
            else:
                assert got == v, f"rank {ME}: {cls.__name__} {k}: {got!r} != {v!r}"
                CHECKS += 1
        for p in model.parameters():
            for name, s in opt.state[p].items():
                if isinstance(s, torch.Tensor):
                    same_everywhere(s, f"{cls.__name__} state {name}")
        # The options are usable, and an LR set on the wrapper is the one the step uses.
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()
        for p in model.parameters():
            same_everywhere(p, f"{cls.__name__} parameter after the next step")
        before = [p.detach().clone() for p in model.parameters()]
        for g in opt.param_groups:
            g["lr"] = torch.tensor(0.0) if isinstance(g["lr"], torch.Tensor) else 0.0
            g["weight_decay"] = 0
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()
        for b, p in zip(before, model.parameters(), strict=True):
            check(p, b, f"{cls.__name__} lr=0 set on the wrapper after broadcast", tol=0)

    # Horovod's no_grad model: an int parameter without gradient next to a trainable one.
    class NoGrad(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Parameter(torch.tensor([1, 3]).int(), requires_grad=False)
            self.b = nn.Parameter(data(ME, (4,), 41).float())

    model = NoGrad()
    opt = hvd.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.001, weight_decay=1e-6, momentum=0.9,
                        nesterov=True), named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    assert opt.param_groups[0]["params"][0].grad is None
    grad = opt.param_groups[0]["params"][1].grad
    assert grad is not None, f"rank {ME}: trainable parameter has no grad after the broadcast"
    check(hvd.broadcast(grad, root_rank=0), grad, "no_grad model grad", tol=0)
    same_everywhere(model.b, "no_grad model parameter")

    # Forced allreduce: a parameter unused on rank 0 contributes zeros to the average; a fresh
    # optimizer (no state) on the other ranks receives rank 0's state and tensor option.
    model = nn.ModuleDict({"used": nn.Linear(3, 2), "extra": nn.Linear(3, 2)})
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    inner = torch.optim.SGD(model.parameters(), lr=torch.tensor(0.5 + ME), momentum=0.9)
    opt = hvd.DistributedOptimizer(inner, named_parameters=model.named_parameters())
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    assert isinstance(opt.param_groups[0]["lr"], torch.Tensor)
    check(opt.param_groups[0]["lr"], torch.tensor(0.5), "lr after broadcast of a fresh state")
    w0 = model["extra"].weight.detach().clone()
    grads = []
    for r in range(N):
        xr = data(r, (4, 3), 42).float()
        ref = nn.ModuleDict({"used": nn.Linear(3, 2), "extra": nn.Linear(3, 2)})
        ref.load_state_dict(model.state_dict())
        loss = ref["used"](xr).sum() + (ref["extra"](xr).sum() if r != 0 else 0)
        loss.backward()
        grads.append(ref["extra"].weight.grad if r != 0 else torch.zeros_like(w0))
    xr = data(ME, (4, 3), 42).float()
    loss = model["used"](xr).sum() + (model["extra"](xr).sum() if ME != 0 else 0)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if N == 1:  # Horovod at one rank: no hooks, so an unused parameter keeps no gradient
        assert model["extra"].weight.grad is None, f"rank {ME}: a gradient at one rank"
        check(model["extra"].weight, w0, "one rank: an unused parameter does not move", 0)
    else:
        check(model["extra"].weight.grad, sum(grads) / N, "forced allreduce averages zeros",
              1e-6)
        check(model["extra"].weight, w0 - 0.5 * sum(grads) / N, "forced allreduce step", 1e-6)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    assert isinstance(opt.param_groups[0]["lr"], torch.Tensor)
    assert type(opt.param_groups[0]["momentum"]) is float and \
        type(opt.param_groups[0]["nesterov"]) is bool
    if N > 1:
        same_everywhere(opt.state[model["extra"].weight]["momentum_buffer"],
                        "momentum after step")


# ----------------------------------------------------------------------------- item 9
def section_optimizer() -> None:
    global CHECKS
    model = nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 2))
    opt = hvd.DistributedOptimizer(torch.optim.SGD(
        [{"params": model[0].parameters()}, {"params": model[1].parameters()}], lr=0.1))
    names = opt._parameter_names
    want = {p: f"allreduce.noname.{i}.{j}" for i, g in enumerate(opt.param_groups)
            for j, p in enumerate(g["params"])}
    assert names == want, f"rank {ME}: {sorted(names.values())}"
    every = hvd.allgather_object(sorted(names.values()))
    assert all(e == every[0] for e in every) and len(set(every[0])) == 4, every
    other = nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 2))
    named = hvd.DistributedOptimizer(torch.optim.SGD(other.parameters(), lr=0.1),
                                     named_parameters=other.named_parameters())
    assert sorted(named._parameter_names.values()) == sorted(n for n, _ in
                                                             other.named_parameters())
    CHECKS += 3
    # step() after synchronize() outside skip_synchronize(): one UserWarning from hvdcore's
    # optimizer module, so Python's default filter shows it once per process.
    x = data(ME, (2, 3), 50).float()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            model(x).sum().backward()
            opt.synchronize()
            opt.step()
            opt.zero_grad()
        model(x).sum().backward()
        opt.synchronize()
        with opt.skip_synchronize():
            opt.step()
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()
        opt.zero_grad()
    mine = [w for w in caught if "skip_synchronize" in str(w.message)]
    assert len(mine) == 2 and all(w.category is UserWarning for w in mine), caught
    assert all(w.filename.replace("\\", "/").endswith("hvdcore/torch/optimizer.py")
               for w in mine), [w.filename for w in mine]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        for _ in range(3):
            model(x).sum().backward()
            opt.synchronize()
            opt.step()
            opt.zero_grad()
    assert len([w for w in caught if "skip_synchronize" in str(w.message)]) == 1, caught
    CHECKS += 2
    # Sparse gradients (nn.Embedding(sparse=True)) with SparseAdam, reduced both ways.
    inputs = [torch.tensor([[1, 2, 4, 5], [4, 3, 2, 9]]) if r % 2 == 0
              else torch.tensor([[1, 3, 4], [4, 7, 9]]) for r in range(N)]
    for sparse_as_dense in (False, True):
        torch.manual_seed(3)
        emb = nn.Embedding(10, 3, sparse=True)
        ref = nn.Embedding(10, 3, sparse=True)
        ref.load_state_dict(emb.state_dict())
        sopt = hvd.DistributedOptimizer(torch.optim.SparseAdam(list(emb.parameters()), lr=0.1),
                                        sparse_as_dense=sparse_as_dense)
        ref_opt = torch.optim.SparseAdam(list(ref.parameters()), lr=0.1)
        for step in range(2):
            dense = []
            for r in range(N):
                ref.zero_grad()
                (ref(inputs[r]) * (step + 1)).sum().backward()
                dense.append(ref.weight.grad.to_dense())
            avg = sum(dense) / N
            emb(inputs[ME]).mul(step + 1).sum().backward()
            sopt.synchronize()
            assert emb.weight.grad.is_sparse, f"sparse_as_dense={sparse_as_dense}: dense grad"
            check(emb.weight.grad.to_dense(), avg, f"sparse grad sad={sparse_as_dense}", 1e-6)
            with sopt.skip_synchronize():
                sopt.step()
            sopt.zero_grad()
            ref.weight.grad = avg.to_sparse()
            ref_opt.step()
            check(emb.weight, ref.weight, f"SparseAdam step sad={sparse_as_dense}", 1e-6)


# ----------------------------------------------------------------------------- issue 52
def horovod_reduce(xs: list[torch.Tensor], pre: float = 1.0, post: float = 1.0,
                   average: bool = False) -> torch.Tensor:
    """Horovod's CPU allreduce arithmetic on the ranks' tensors ``xs`` (issue 52, item 2).

    Average is a Sum whose postscale is divided by the set size in double (EnqueueTensorAllreduce,
    horovod/common/operations.cc). AllreduceOp::ScaleBuffer / ScaleBufferImpl
    (horovod/common/ops/collective_operations.{h,cc}) scale integers in float64 (the factor is
    a double; the product converts to the integer type, truncating), float32 and float16 with
    the factor cast to float, float16 by way of float32 and rounded once (HalfBits2Float,
    Float2HalfBits), float64 in float64. MPI's float16 sum (float16_sum, horovod/common/
    half.cc) adds two values in float32 and rounds to float16 after every addition; with the
    same tensor on every rank, or 2 ranks, the order does not matter. The test that pins this
    is test_horovod_allreduce_prescale in test/parallel/test_torch.py (threshold 0 up to 3
    ranks, factor np.random.uniform() after np.random.seed(1234) = 0.1915194503788923).
    """
    dt = xs[0].dtype
    post = post / len(xs) if average else post

    def scale(t: torch.Tensor, f: float) -> torch.Tensor:
        if f == 1.0:
            return t
        f64 = torch.tensor(f, dtype=torch.float64)
        if dt == torch.float16:
            return (t.float() * f64.float()).half()
        if dt.is_floating_point:
            return t * f64.to(dt)
        return (t.double() * f64).to(dt)

    scaled = [scale(x, pre) for x in xs]
    total = scaled[0]
    for x in scaled[1:]:
        total = (total.float() + x.float()).half() if dt == torch.float16 else total + x
    return scale(total, post)


def same_bits(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    global CHECKS
    assert got.dtype == want.dtype and got.shape == want.shape, (what, got.dtype, got.shape)
    ok = (torch.equal(got.view(torch.int16), want.view(torch.int16)) if got.dtype == torch.float16
          else torch.equal(got, want))
    if not ok:
        worst = (got.double() - want.double()).abs().max().item()
        raise AssertionError(f"rank {ME}: {what}: not Horovod's result bit for bit "
                             f"(largest difference {worst})")
    CHECKS += 1


FACTOR = 0.1915194503788923  # test_torch.py: np.random.seed(1234); np.random.uniform()


def section_parity() -> None:
    """Issue 52 for torch: a stray second init() (item 1), Horovod's scaling arithmetic bit for
    bit (item 2), the optimizer's warning (item 8)."""
    global CHECKS
    # item 1: init() on an initialised process is a local no-op (horovod/common/basics.py
    # HorovodBasics.init; every test of test/parallel/test_torch.py calls hvd.init() again).
    # One rank calls it twice more: before the fix that started a collective only this rank
    # was in (the data-plane vote), and the next collective stalled.
    if ME == N - 1:
        hvd.init()
        hvd.init()
    check(hvd.allreduce(torch.ones(3), op=hvd.Sum, name="after.stray.init"),
          torch.full((3,), float(N)), "allreduce after a stray init()")
    hvd.init()  # every rank again: still no collective
    check(hvd.allgather(torch.tensor([ME])), torch.arange(N), "allgather after init() again")
    # item 2: Horovod's test: the same tensor on every rank, Sum with a prescale factor.
    for dim in (1, 2, 3):
        torch.manual_seed(1234)
        base = torch.FloatTensor(*([17] * dim)).random_(-100, 100)
        for dt in (torch.float16, torch.float32, torch.float64, torch.int32, torch.int64,
                   torch.uint8, torch.int8):
            t = base.abs().to(dt) if dt == torch.uint8 else base.to(dt)
            got = hvd.allreduce(t, op=hvd.Sum, prescale_factor=FACTOR)
            same_bits(got, horovod_reduce([t] * N, pre=FACTOR), f"prescale {dt} dim {dim}")
    # Each rank its own float16 values (order-free at 2 ranks; at 3 ranks the same tensor),
    # through allreduce, grouped allreduce, reducescatter and grouped reducescatter, with
    # prescale, postscale and Average.
    def halves(r: int, salt: int) -> torch.Tensor:
        g = torch.Generator().manual_seed(52 + salt + (r if N <= 2 else 0))
        return (torch.rand((6, 5), generator=g, dtype=torch.float64) * 200 - 100).half()

    for pre, post, avg in ((FACTOR, 1.0, False), (1.0, FACTOR, False), (FACTOR, 1.7, True),
                           (1.0, 1.0, True), (0.3, 3.1, False)):
        op = hvd.Average if avg else hvd.Sum
        xs = [halves(r, 1) for r in range(N)]
        ys = [halves(r, 2)[:4] for r in range(N)]
        what = f"float16 pre={pre} post={post} avg={avg}"
        want_x = horovod_reduce(xs, pre, post, avg)
        want_y = horovod_reduce(ys, pre, post, avg)
        same_bits(hvd.allreduce(xs[ME], op=op, prescale_factor=pre, postscale_factor=post),
                  want_x, f"allreduce {what}")
        gx, gy = hvd.grouped_allreduce([xs[ME], ys[ME]], op=op, prescale_factor=pre,
                                       postscale_factor=post)
        same_bits(gx, want_x, f"grouped_allreduce {what}")
        same_bits(gy, want_y, f"grouped_allreduce[1] {what}")
        rows = [6 // N + (1 if i < 6 % N else 0) for i in range(N)]
        mine = slice(sum(rows[:ME]), sum(rows[:ME + 1]))
        same_bits(hvd.reducescatter(xs[ME], op=op, prescale_factor=pre, postscale_factor=post),
                  want_x[mine], f"reducescatter {what}")
        rx, ry = hvd.grouped_reducescatter([xs[ME], ys[ME]], op=op, prescale_factor=pre,
                                           postscale_factor=post)
        rows_y = [4 // N + (1 if i < 4 % N else 0) for i in range(N)]
        same_bits(rx, want_x[mine], f"grouped_reducescatter {what}")
        same_bits(ry, want_y[sum(rows_y[:ME]):sum(rows_y[:ME + 1])],
                  f"grouped_reducescatter[1] {what}")
    for dt in (torch.int32, torch.int64):  # Average and scales of integers: float64, truncated
        t = (data(ME, (9,), 52) * 1000).to(dt)
        want = horovod_reduce([(data(r, (9,), 52) * 1000).to(dt) for r in range(N)], 0.37, 2.9,
                              True)
        same_bits(hvd.allreduce(t, op=hvd.Average, prescale_factor=0.37, postscale_factor=2.9),
                  want, f"Average {dt} with scales")
    # item 8: Horovod's warning text (horovod/torch/optimizer.py, _DistributedOptimizer.step)
    # on every step() after synchronize() outside skip_synchronize(); repetition is left to
    # Python's warning filters, so a filter copied from a Horovod script silences it.
    model = nn.Linear(3, 2)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    x = data(ME, (2, 3), 53).float()

    horovods = re.compile(r"optimizer\.step\(\) called without optimizer\.skip_synchronize\(\) "
                          r"context after optimizer\.synchronize\(\)\.")

    def steps(k: int, horovod_filter: bool) -> list[warnings.WarningMessage]:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if horovod_filter:  # the filter a Horovod script sets
                warnings.filterwarnings("ignore", message=r"optimizer\.step\(\) called without "
                                        r"optimizer\.skip_synchronize\(\) context")
            for _ in range(k):
                model(x).sum().backward()
                opt.synchronize()
                opt.step()
                opt.zero_grad()
        return [w for w in caught if "synchronize" in str(w.message)]

    seen = steps(3, False)
    assert len(seen) == 3 and all(horovods.match(str(w.message)) for w in seen), (
        f"rank {ME}: {[str(w.message) for w in seen]}")
    assert steps(2, True) == [], f"rank {ME}: a Horovod script's filter did not match"
    CHECKS += 2


SECTIONS = {"grad": section_grad, "alltoall": section_alltoall, "sparse": section_sparse,
            "bcast_state": section_bcast_state, "optimizer": section_optimizer,
            "parity": section_parity}
names = list(SECTIONS) if sys.argv[1:] == ["all"] else sys.argv[1:]
unknown = [n for n in names if n not in SECTIONS]
if not names or unknown:
    sys.exit(f"usage: torch_semantics.py all | SECTION ... (sections: {', '.join(SECTIONS)}); "
             f"unknown: {unknown}")
for name in names:
    CHECKS = 0
    SECTIONS[name]()
    print(f"torch-semantics {name} rank={ME} size={N} checks={CHECKS} OK", flush=True)
hvd.shutdown()
print(f"torch-semantics shutdown rank={ME} OK", flush=True)
